package filesystem

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/hutch-sandbox/hutch/api/gen/filesystem"
	"github.com/hutch-sandbox/hutch/api/gen/filesystem/filesystemconnect"
)

// watchStream reads a WatchDir stream in the background.
type watchStream struct {
	t      *testing.T
	msgs   chan *pb.WatchDirResponse
	err    chan error
	cancel context.CancelFunc
	seen   []*pb.FilesystemEvent
}

func startWatch(t *testing.T, ctx context.Context, c filesystemconnect.FilesystemClient, req *connect.Request[pb.WatchDirRequest]) *watchStream {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	s, err := c.WatchDir(ctx, req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	ws := &watchStream{t: t, msgs: make(chan *pb.WatchDirResponse, 1000), err: make(chan error, 1), cancel: cancel}
	go func() {
		for s.Receive() {
			ws.msgs <- s.Msg()
		}
		ws.err <- s.Err()
		close(ws.msgs)
		s.Close()
	}()
	t.Cleanup(cancel)
	return ws
}

// next returns the next message, or nil when the stream ended.
func (ws *watchStream) next(timeout time.Duration) *pb.WatchDirResponse {
	ws.t.Helper()
	select {
	case m, ok := <-ws.msgs:
		if !ok {
			return nil
		}
		return m
	case <-time.After(timeout):
		ws.t.Fatalf("no message within %v; events so far: %v", timeout, names(ws.seen))
		return nil
	}
}

// waitFor reads events until one named name of type typ arrives.
func (ws *watchStream) waitFor(name string, typ pb.EventType) *pb.FilesystemEvent {
	ws.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		m := ws.next(time.Until(deadline))
		if m == nil {
			ws.t.Fatalf("stream ended (%v) before %s %s; events: %v", <-ws.err, typ, name, names(ws.seen))
		}
		fe := m.GetFilesystem()
		if fe == nil {
			continue // keepalive
		}
		ws.seen = append(ws.seen, fe)
		if fe.GetName() == name && fe.GetType() == typ {
			return fe
		}
	}
}

// quiet collects the events arriving within d.
func (ws *watchStream) quiet(d time.Duration) []*pb.FilesystemEvent {
	var out []*pb.FilesystemEvent
	timer := time.After(d)
	for {
		select {
		case m, ok := <-ws.msgs:
			if !ok {
				return out
			}
			if fe := m.GetFilesystem(); fe != nil {
				out = append(out, fe)
				ws.seen = append(ws.seen, fe)
			}
		case <-timer:
			return out
		}
	}
}

func names(evs []*pb.FilesystemEvent) []string {
	var out []string
	for _, e := range evs {
		out = append(out, strings.TrimPrefix(e.GetType().String(), "EVENT_TYPE_")+" "+e.GetName())
	}
	return out
}

func count(evs []*pb.FilesystemEvent, name string, typ pb.EventType) int {
	n := 0
	for _, e := range evs {
		if e.GetName() == name && e.GetType() == typ {
			n++
		}
	}
	return n
}

// inotifyFDs counts this process's inotify instances, to prove that every
// exit path releases its watcher.
func inotifyFDs(t *testing.T) int {
	t.Helper()
	des, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	n := 0
	for _, de := range des {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", de.Name())); err == nil && l == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

func waitInotifyFDs(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := inotifyFDs(t)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d inotify instances open, want %d: a watcher leaked", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestWatchDirRecursive(t *testing.T) {
	e := newEnv(t)
	e.eachCodec(t, func(t *testing.T, c filesystemconnect.FilesystemClient) {
		dir := t.TempDir()
		mkdir(t, filepath.Join(dir, "old"))
		before := inotifyFDs(t)
		req := connect.NewRequest(&pb.WatchDirRequest{Path: dir, Recursive: true, IncludeEntry: true})
		ws := startWatch(t, context.Background(), c, req)

		first := ws.next(5 * time.Second)
		if first.GetStart() == nil {
			t.Fatalf("first message is %v, want start", first)
		}

		// Create and write: entries included.
		f := filepath.Join(dir, "a.txt")
		fh, err := os.Create(f)
		if err != nil {
			t.Fatal(err)
		}
		ev := ws.waitFor("a.txt", pb.EventType_EVENT_TYPE_CREATE)
		if ev.GetEntry().GetPath() != f || ev.GetEntry().GetType() != pb.FileType_FILE_TYPE_FILE {
			t.Errorf("CREATE entry = %v", ev.GetEntry())
		}
		if _, err := fh.WriteString("hello"); err != nil {
			t.Fatal(err)
		}
		fh.Close()
		ev = ws.waitFor("a.txt", pb.EventType_EVENT_TYPE_WRITE)
		if ev.Entry == nil || ev.GetEntry().GetName() != "a.txt" {
			t.Errorf("WRITE entry = %v", ev.GetEntry())
		}
		if err := os.Chmod(f, 0o600); err != nil {
			t.Fatal(err)
		}
		ev = ws.waitFor("a.txt", pb.EventType_EVENT_TYPE_CHMOD)
		if ev.GetEntry().GetMode() != 0o600 {
			t.Errorf("CHMOD entry = %v", ev.GetEntry())
		}

		// A directory that existed before the watch is watched too.
		writeFile(t, filepath.Join(dir, "old", "x"), "", 0o644)
		ws.waitFor("old/x", pb.EventType_EVENT_TYPE_CREATE)

		// A new subdirectory is watched once it appears.
		mkdir(t, filepath.Join(dir, "sub"))
		ev = ws.waitFor("sub", pb.EventType_EVENT_TYPE_CREATE)
		if ev.GetEntry().GetType() != pb.FileType_FILE_TYPE_DIRECTORY {
			t.Errorf("sub entry = %v", ev.GetEntry())
		}
		writeFile(t, filepath.Join(dir, "sub", "f.txt"), "x", 0o644)
		ws.waitFor("sub/f.txt", pb.EventType_EVENT_TYPE_CREATE)

		// Whatever appears in a new tree before its watches exist is still
		// reported.
		writeFile(t, filepath.Join(dir, "n1", "n2", "deep.txt"), "x", 0o644)
		ws.waitFor("n1/n2/deep.txt", pb.EventType_EVENT_TYPE_CREATE)

		// Rename: RENAME for the old name (no entry), CREATE for the new.
		if err := os.Rename(f, filepath.Join(dir, "b.txt")); err != nil {
			t.Fatal(err)
		}
		ev = ws.waitFor("a.txt", pb.EventType_EVENT_TYPE_RENAME)
		if ev.Entry != nil {
			t.Errorf("RENAME carries an entry: %v", ev.GetEntry())
		}
		ws.waitFor("b.txt", pb.EventType_EVENT_TYPE_CREATE)

		if err := os.Remove(filepath.Join(dir, "b.txt")); err != nil {
			t.Fatal(err)
		}
		ev = ws.waitFor("b.txt", pb.EventType_EVENT_TYPE_REMOVE)
		if ev.Entry != nil {
			t.Errorf("REMOVE carries an entry: %v", ev.GetEntry())
		}
		if err := os.RemoveAll(filepath.Join(dir, "sub")); err != nil {
			t.Fatal(err)
		}
		ws.waitFor("sub/f.txt", pb.EventType_EVENT_TYPE_REMOVE)
		ws.waitFor("sub", pb.EventType_EVENT_TYPE_REMOVE)

		// stop(): the client cancels, and the server releases its watcher.
		ws.cancel()
		waitInotifyFDs(t, before)
	})
}

// TestWatchDirSubdirectoryEvents checks the two places where inotify reports
// one change twice for a watched subdirectory (its parent's watch and its
// own): each change must reach the client once, and a renamed directory must
// be reported under its new name afterwards.
func TestWatchDirSubdirectoryEvents(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	mkdir(t, filepath.Join(dir, "sub"))
	ws := startWatch(t, context.Background(), e.jsonClient(), connect.NewRequest(&pb.WatchDirRequest{Path: dir, Recursive: true}))
	if ws.next(5*time.Second).GetStart() == nil {
		t.Fatal("no start")
	}

	for i, mode := range []os.FileMode{0o700, 0o750} {
		if err := os.Chmod(filepath.Join(dir, "sub"), mode); err != nil {
			t.Fatal(err)
		}
		marker := fmt.Sprintf("marker%d", i)
		writeFile(t, filepath.Join(dir, marker), "", 0o644)
		ws.waitFor(marker, pb.EventType_EVENT_TYPE_CREATE)
	}
	if n := count(ws.seen, "sub", pb.EventType_EVENT_TYPE_CHMOD); n != 2 {
		t.Errorf("two chmods of sub gave %d CHMOD events: %v", n, names(ws.seen))
	}

	if err := os.Rename(filepath.Join(dir, "sub"), filepath.Join(dir, "moved")); err != nil {
		t.Fatal(err)
	}
	ws.waitFor("moved", pb.EventType_EVENT_TYPE_CREATE)
	writeFile(t, filepath.Join(dir, "moved", "inside"), "", 0o644)
	ws.waitFor("moved/inside", pb.EventType_EVENT_TYPE_CREATE)
	ws.quiet(200 * time.Millisecond)
	if n := count(ws.seen, "sub", pb.EventType_EVENT_TYPE_RENAME); n != 1 {
		t.Errorf("renaming sub gave %d RENAME events: %v", n, names(ws.seen))
	}
	for _, ev := range ws.seen {
		if strings.HasPrefix(ev.GetName(), "sub/") {
			t.Errorf("event under the old name: %v", names(ws.seen))
		}
	}
}

func TestWatchDirNonRecursive(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	mkdir(t, filepath.Join(dir, "sub"))
	ws := startWatch(t, context.Background(), e.jsonClient(), connect.NewRequest(&pb.WatchDirRequest{Path: dir}))
	if ws.next(5*time.Second).GetStart() == nil {
		t.Fatal("no start")
	}
	writeFile(t, filepath.Join(dir, "sub", "hidden"), "x", 0o644)
	writeFile(t, filepath.Join(dir, "top"), "x", 0o644)
	ev := ws.waitFor("top", pb.EventType_EVENT_TYPE_CREATE)
	if ev.Entry != nil {
		t.Errorf("entry without includeEntry: %v", ev.GetEntry())
	}
	ws.quiet(100 * time.Millisecond)
	for _, ev := range ws.seen {
		if strings.HasPrefix(ev.GetName(), "sub/") {
			t.Errorf("non-recursive watch reported %v", names(ws.seen))
		}
		if ev.Entry != nil {
			t.Errorf("entry without includeEntry on %s", ev.GetName())
		}
	}
}

func TestWatchDirErrors(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	writeFile(t, file, "", 0o644)
	before := inotifyFDs(t)
	tests := []struct {
		name string
		path string
		code connect.Code
	}{
		{"missing", filepath.Join(dir, "missing"), connect.CodeNotFound},
		{"not a directory", file, connect.CodeInvalidArgument},
	}
	e.eachCodec(t, func(t *testing.T, c filesystemconnect.FilesystemClient) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ws := startWatch(t, context.Background(), c, connect.NewRequest(&pb.WatchDirRequest{Path: tt.path}))
				if m := ws.next(5 * time.Second); m != nil {
					t.Fatalf("got message %v before the error", m)
				}
				wantCode(t, <-ws.err, tt.code)

				_, err := c.CreateWatcher(context.Background(), connect.NewRequest(&pb.CreateWatcherRequest{Path: tt.path}))
				wantCode(t, err, tt.code)
			})
		}
	})
	waitInotifyFDs(t, before)
}

func TestWatchDirKeepalive(t *testing.T) {
	e := newEnv(t)
	req := connect.NewRequest(&pb.WatchDirRequest{Path: t.TempDir()})
	req.Header().Set("Keepalive-Ping-Interval", "1")
	ws := startWatch(t, context.Background(), e.jsonClient(), req)
	if ws.next(5*time.Second).GetStart() == nil {
		t.Fatal("no start")
	}
	start := time.Now()
	for range 2 {
		if m := ws.next(3 * time.Second); m.GetKeepalive() == nil {
			t.Fatalf("got %v, want keepalive", m)
		}
	}
	if d := time.Since(start); d < 1500*time.Millisecond {
		t.Errorf("two keepalives within %v with a 1s interval", d)
	}
}

func TestKeepaliveInterval(t *testing.T) {
	for in, want := range map[string]time.Duration{"": defaultKeepalive, "50": 50 * time.Second, "0": defaultKeepalive, "x": defaultKeepalive, "-3": defaultKeepalive} {
		h := make(map[string][]string)
		if in != "" {
			h["Keepalive-Ping-Interval"] = []string{in}
		}
		if got := keepaliveInterval(h); got != want {
			t.Errorf("%q → %v, want %v", in, got, want)
		}
	}
}

// TestWatchDirDeadline: the stream ends with deadline_exceeded at the
// Connect-Timeout-Ms deadline (the SDK's TimeoutError) and frees its watcher.
func TestWatchDirDeadline(t *testing.T) {
	e := newEnv(t)
	before := inotifyFDs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	ws := startWatch(t, ctx, e.jsonClient(), connect.NewRequest(&pb.WatchDirRequest{Path: t.TempDir(), Recursive: true}))
	if ws.next(5*time.Second).GetStart() == nil {
		t.Fatal("no start")
	}
	if m := ws.next(5 * time.Second); m != nil {
		t.Fatalf("unexpected message %v", m)
	}
	wantCode(t, <-ws.err, connect.CodeDeadlineExceeded)
	waitInotifyFDs(t, before)
}

func TestNetworkFilesystemCheck(t *testing.T) {
	if fsType, ok := networkFilesystem(t.TempDir()); ok {
		t.Skipf("temp dir is on %s", fsType)
	}
	if _, ok := networkFilesystem("/proc"); ok {
		t.Error("/proc taken for a network filesystem")
	}
}

func TestPollingWatcher(t *testing.T) {
	e := newEnv(t)
	e.eachCodec(t, func(t *testing.T, c filesystemconnect.FilesystemClient) {
		ctx := context.Background()
		dir := t.TempDir()
		before := inotifyFDs(t)
		resp, err := c.CreateWatcher(ctx, connect.NewRequest(&pb.CreateWatcherRequest{Path: dir, Recursive: true, IncludeEntry: true}))
		if err != nil {
			t.Fatal(err)
		}
		id := resp.Msg.GetWatcherId()
		if !strings.HasPrefix(id, "w") || len(id) < 10 {
			t.Fatalf("watcher id %q", id)
		}

		mkdir(t, filepath.Join(dir, "sub"))
		writeFile(t, filepath.Join(dir, "sub", "f"), "x", 0o644)
		var got []*pb.FilesystemEvent
		deadline := time.Now().Add(5 * time.Second)
		for count(got, "sub/f", pb.EventType_EVENT_TYPE_CREATE) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("no CREATE sub/f; got %v", names(got))
			}
			r, err := c.GetWatcherEvents(ctx, connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: id}))
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, r.Msg.GetEvents()...)
			time.Sleep(20 * time.Millisecond)
		}
		if count(got, "sub", pb.EventType_EVENT_TYPE_CREATE) != 1 {
			t.Errorf("events = %v", names(got))
		}
		for _, ev := range got {
			if ev.GetType() == pb.EventType_EVENT_TYPE_CREATE && ev.Entry == nil {
				t.Errorf("CREATE %s without entry", ev.GetName())
			}
		}

		// Drained: nothing new without changes.
		time.Sleep(100 * time.Millisecond)
		r, err := c.GetWatcherEvents(ctx, connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: id}))
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range r.Msg.GetEvents() {
			if ev.GetName() == "sub" && ev.GetType() == pb.EventType_EVENT_TYPE_CREATE {
				t.Errorf("event delivered twice: %v", names(r.Msg.GetEvents()))
			}
		}

		if _, err := c.RemoveWatcher(ctx, connect.NewRequest(&pb.RemoveWatcherRequest{WatcherId: id})); err != nil {
			t.Fatal(err)
		}
		waitInotifyFDs(t, before)
		_, err = c.GetWatcherEvents(ctx, connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: id}))
		wantCode(t, err, connect.CodeNotFound)
		_, err = c.RemoveWatcher(ctx, connect.NewRequest(&pb.RemoveWatcherRequest{WatcherId: id}))
		wantCode(t, err, connect.CodeNotFound)
		_, err = c.GetWatcherEvents(ctx, connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: "wnope"}))
		wantCode(t, err, connect.CodeNotFound)
	})
}

// TestPollingWatcherFailure: a failed watcher reports its failure on the
// next poll, after the events buffered before it.
func TestPollingWatcherFailure(t *testing.T) {
	e := newEnv(t)
	c := e.jsonClient()
	ctx := context.Background()
	resp, err := c.CreateWatcher(ctx, connect.NewRequest(&pb.CreateWatcherRequest{Path: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	id := resp.Msg.GetWatcherId()
	e.svc.mu.Lock()
	pw := e.svc.watchers[id]
	e.svc.mu.Unlock()
	pw.mu.Lock()
	pw.events = append(pw.events, &pb.FilesystemEvent{Name: "x", Type: pb.EventType_EVENT_TYPE_CREATE})
	pw.err = fmt.Errorf("watch: %w", os.ErrPermission)
	pw.mu.Unlock()

	r, err := c.GetWatcherEvents(ctx, connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: id}))
	if err != nil || len(r.Msg.GetEvents()) != 1 {
		t.Fatalf("first poll: %v %v", r, err)
	}
	_, err = c.GetWatcherEvents(ctx, connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: id}))
	wantCode(t, err, connect.CodePermissionDenied)
	if _, err := c.RemoveWatcher(ctx, connect.NewRequest(&pb.RemoveWatcherRequest{WatcherId: id})); err != nil {
		t.Fatal(err)
	}
}

// TestServiceCloseReleasesWatchers: Close stops polled watchers that were
// never removed.
func TestServiceCloseReleasesWatchers(t *testing.T) {
	e := newEnv(t)
	before := inotifyFDs(t)
	for range 3 {
		if _, err := e.jsonClient().CreateWatcher(context.Background(), connect.NewRequest(&pb.CreateWatcherRequest{Path: t.TempDir()})); err != nil {
			t.Fatal(err)
		}
	}
	if got := inotifyFDs(t); got != before+3 {
		t.Fatalf("%d inotify instances, want %d", got, before+3)
	}
	e.svc.Close()
	waitInotifyFDs(t, before)
}
