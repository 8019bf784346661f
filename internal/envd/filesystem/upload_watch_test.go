package filesystem

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/hutch-sandbox/hutch/api/gen/filesystem"
)

// An upload through /files (a temporary file renamed into place) looks to a
// watcher like the reference envd's in-place write: CREATE and WRITE of the
// target, and nothing of the temporary file.
func TestWatchDirSeesUploadsAsWrites(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	ws := startWatch(t, context.Background(), e.jsonClient(), connect.NewRequest(&pb.WatchDirRequest{Path: dir}))
	if ws.next(5*time.Second).GetStart() == nil {
		t.Fatal("no start")
	}
	for _, round := range []string{"new", "overwrite"} {
		tmp := filepath.Join(dir, ".target.hutch-upload-0123456789abcdef")
		writeFile(t, tmp, "content of "+round, 0o644)
		if err := os.Rename(tmp, filepath.Join(dir, "target")); err != nil {
			t.Fatal(err)
		}
		ws.waitFor("target", pb.EventType_EVENT_TYPE_WRITE)
		ws.quiet(100 * time.Millisecond)
	}
	if n := count(ws.seen, "target", pb.EventType_EVENT_TYPE_CREATE); n != 2 {
		t.Errorf("CREATE events for the target: %d, want 2 (one per upload): %v", n, names(ws.seen))
	}
	for _, ev := range ws.seen {
		if strings.Contains(ev.GetName(), "hutch-upload") {
			t.Errorf("the watcher reported the upload's temporary file: %v", names(ws.seen))
		}
	}
}
