package filesystem

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"

	pb "github.com/hutch-sandbox/hutch/api/gen/filesystem"
	"github.com/hutch-sandbox/hutch/internal/envd/files"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// defaultKeepalive is how long a stream may stay silent before a keepalive
// message is sent when the request has no Keepalive-Ping-Interval header;
// it is the reference envd's default.
const defaultKeepalive = 90 * time.Second

// keepaliveInterval reads Keepalive-Ping-Interval (whole seconds), which the
// SDKs send so that idle streams outlive their HTTP clients' idle timeouts.
func keepaliveInterval(h http.Header) time.Duration {
	if n, err := strconv.Atoi(strings.TrimSpace(h.Get("Keepalive-Ping-Interval"))); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return defaultKeepalive
}

// WatchDir streams the changes below a directory until the client cancels
// or the Connect-Timeout-Ms deadline passes. The first message is always
// start, sent before anything else happens, because the SDK waits for it
// before returning the watch handle.
func (s *Service) WatchDir(ctx context.Context, req *connect.Request[pb.WatchDirRequest], stream *connect.ServerStream[pb.WatchDirResponse]) error {
	_, path, err := s.userAndPath(req.Header(), req.Msg.GetPath())
	if err != nil {
		return err
	}
	w, err := newDirWatcher(path, req.Msg.GetRecursive(), req.Msg.GetIncludeEntry(), req.Msg.GetAllowNetworkMounts(), s.logger)
	if err != nil {
		return err
	}
	defer w.close()

	if err := stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Start{Start: &pb.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}

	interval := keepaliveInterval(req.Header())
	idle := time.NewTimer(interval)
	defer idle.Stop()
	send := func(msg *pb.WatchDirResponse) error {
		idle.Reset(interval)
		return stream.Send(msg)
	}
	for {
		select {
		case <-ctx.Done():
			// Cancel (stop()) or deadline: report it as such so a deadline
			// reaches the SDK as deadline_exceeded (TimeoutError).
			return ctx.Err()
		case <-idle.C:
			if err := send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Keepalive{Keepalive: &pb.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
		case err, ok := <-w.fw.Errors:
			if !ok {
				return errors.New("watcher closed")
			}
			return fmt.Errorf("watch %s: %w", path, err)
		case ev, ok := <-w.fw.Events:
			if !ok {
				return errors.New("watcher closed")
			}
			for _, fe := range w.translate(ev) {
				if err := send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Filesystem{Filesystem: fe}}); err != nil {
					return err
				}
			}
		}
	}
}

// dirWatcher is one fsnotify watcher over a directory (and, when recursive,
// every directory below it), turning raw notifications into protocol
// events. Both WatchDir and the polled watchers use it. It is not safe for
// concurrent use: one goroutine reads fw.Events and calls translate.
type dirWatcher struct {
	root         string
	recursive    bool
	includeEntry bool
	fw           *fsnotify.Watcher
	logger       *slog.Logger

	// dirs holds the directories with an inotify watch of ours, to know what
	// to forget when one is removed or renamed away.
	dirs map[string]bool
	last fsnotify.Event // previous raw event, to drop duplicates (see translate)
	// uploaded is set when an upload's temporary file was just renamed
	// away: the next CREATE is its target.
	uploaded bool
}

// newDirWatcher validates path (exists, is a directory, not a network mount
// unless allowed) and starts watching it. The caller must close it.
func newDirWatcher(path string, recursive, includeEntry, allowNetworkMounts bool, logger *slog.Logger) (*dirWatcher, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", path, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("watch %s: not a directory: %w", path, errdefs.ErrInvalidArgument)
	}
	if !allowNetworkMounts {
		if fsType, ok := networkFilesystem(path); ok {
			// inotify only sees changes made through this machine's kernel,
			// so a watch on a shared mount silently misses remote writers;
			// the SDK makes the caller opt in with allowNetworkMounts.
			return nil, fmt.Errorf("watch %s: directory is on a network filesystem (%s); set allowNetworkMounts to watch it anyway: %w",
				path, fsType, errdefs.ErrInvalidArgument)
		}
	}
	// Unbuffered on purpose: fsnotify then handles the next kernel event only
	// after translate has seen the previous one, so the watches translate
	// removes on a directory rename are gone before their stale events are
	// decoded (they are then dropped instead of reported twice).
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("create watcher: %w", err)
	}
	w := &dirWatcher{root: path, recursive: recursive, includeEntry: includeEntry, fw: fw, logger: logger, dirs: map[string]bool{}}
	if err := w.add(path); err != nil {
		fw.Close()
		return nil, fmt.Errorf("watch %s: %w", path, err)
	}
	if recursive {
		if _, err := w.addTree(path, false); err != nil {
			fw.Close()
			return nil, fmt.Errorf("watch %s: %w", path, err)
		}
	}
	return w, nil
}

func (w *dirWatcher) close() {
	if err := w.fw.Close(); err != nil {
		w.logger.Debug("close watcher", "path", w.root, "err", err)
	}
}

func (w *dirWatcher) add(dir string) error {
	if err := w.fw.Add(dir); err != nil {
		return err
	}
	w.dirs[dir] = true
	return nil
}

// addTree watches every directory below dir (dir itself is already
// watched). With synthesize it also returns CREATE events for everything
// found: for a directory that just appeared, whatever was created inside it
// before its watch existed would otherwise never be reported. Symlinks are
// not followed, so link cycles cannot recurse forever.
func (w *dirWatcher) addTree(dir string, synthesize bool) ([]*pb.FilesystemEvent, error) {
	var out []*pb.FilesystemEvent
	var names *idNames
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p != dir && (errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission)) {
				return nil // vanished or unreadable subtree: nothing to watch
			}
			return err
		}
		if p == dir {
			return nil
		}
		if d.IsDir() {
			if err := w.add(p); err != nil {
				if errors.Is(err, os.ErrNotExist) {
					return fs.SkipDir
				}
				return err
			}
		}
		if synthesize {
			fe := &pb.FilesystemEvent{Name: w.rel(p), Type: pb.EventType_EVENT_TYPE_CREATE}
			if w.includeEntry {
				if names == nil {
					names = loadIDNames()
				}
				if e, err := statEntry(p, names); err == nil {
					fe.Entry = e
				}
			}
			out = append(out, fe)
		}
		return nil
	})
	return out, err
}

// forget drops the watches on dir and below, after dir was removed or
// renamed. Renamed directories keep their inotify watches under the old
// path, which would report later events under a wrong name; if the new
// location is inside the tree, its CREATE event watches it again.
func (w *dirWatcher) forget(dir string) {
	for d := range w.dirs {
		if d == dir || strings.HasPrefix(d, dir+"/") {
			delete(w.dirs, d)
			// The kernel drops watches of deleted directories by itself, so
			// "no such watch" is expected here.
			_ = w.fw.Remove(d)
		}
	}
}

func (w *dirWatcher) rel(p string) string {
	if r, err := filepath.Rel(w.root, p); err == nil {
		return r
	}
	return p
}

var opTypes = []struct {
	op fsnotify.Op
	t  pb.EventType
}{
	{fsnotify.Create, pb.EventType_EVENT_TYPE_CREATE},
	{fsnotify.Write, pb.EventType_EVENT_TYPE_WRITE},
	{fsnotify.Remove, pb.EventType_EVENT_TYPE_REMOVE},
	{fsnotify.Rename, pb.EventType_EVENT_TYPE_RENAME},
	{fsnotify.Chmod, pb.EventType_EVENT_TYPE_CHMOD},
}

// translate turns one fsnotify event into protocol events (one per
// operation it carries), and keeps the recursive watch set up to date.
func (w *dirWatcher) translate(ev fsnotify.Event) []*pb.FilesystemEvent {
	// A watched subdirectory has two watches that see its attribute changes:
	// its parent's (with its name) and its own. The kernel queues both
	// back to back, so the second is an exact repeat of the first.
	if ev == w.last && ev.Name != w.root && w.dirs[ev.Name] {
		// Forget it, so that a real second change is not taken for a repeat.
		w.last = fsnotify.Event{}
		return nil
	}
	w.last = ev

	// envd's uploads write a temporary file and rename it into place
	// (internal/envd/files), so that no partial file is ever visible.
	// Watchers see neither the temporary file nor the rename, but what the
	// reference envd's in-place write shows: CREATE and WRITE of the target.
	// The kernel queues a rename's two halves back to back.
	if files.IsUploadTemp(filepath.Base(ev.Name)) {
		w.uploaded = ev.Has(fsnotify.Rename)
		return nil
	}
	if w.uploaded && ev.Has(fsnotify.Create) {
		ev.Op |= fsnotify.Write
	}
	w.uploaded = false

	var out []*pb.FilesystemEvent
	var entry *pb.EntryInfo
	entryDone := false
	for _, m := range opTypes {
		if !ev.Has(m.op) {
			continue
		}
		fe := &pb.FilesystemEvent{Name: w.rel(ev.Name), Type: m.t}
		if w.includeEntry && (m.t == pb.EventType_EVENT_TYPE_CREATE || m.t == pb.EventType_EVENT_TYPE_WRITE || m.t == pb.EventType_EVENT_TYPE_CHMOD) {
			if !entryDone {
				entryDone = true
				// Gone again already: send the event without an entry.
				entry, _ = statEntry(ev.Name, loadIDNames())
			}
			fe.Entry = entry
		}
		out = append(out, fe)
	}

	if (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)) && ev.Name != w.root {
		w.forget(ev.Name)
	}
	if w.recursive && ev.Has(fsnotify.Create) {
		if fi, err := os.Lstat(ev.Name); err == nil && fi.IsDir() {
			if err := w.add(ev.Name); err != nil {
				w.logger.Warn("watch new directory", "path", ev.Name, "err", err)
			} else {
				more, err := w.addTree(ev.Name, true)
				if err != nil {
					w.logger.Warn("watch new directory tree", "path", ev.Name, "err", err)
				}
				out = append(out, more...)
			}
		}
	}
	return out
}

// networkFilesystem reports whether path lives on a filesystem whose
// changes may come from other machines, by statfs magic number.
func networkFilesystem(path string) (string, bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return "", false
	}
	name, ok := networkFSMagic[int64(st.Type)]
	return name, ok
}

// networkFSMagic lists the f_type values of shared and remote filesystems
// (linux/magic.h and the filesystems' own headers).
var networkFSMagic = map[int64]string{
	unix.NFS_SUPER_MAGIC:  "nfs",
	unix.SMB_SUPER_MAGIC:  "smb",
	unix.SMB2_SUPER_MAGIC: "smb2",
	unix.CIFS_SUPER_MAGIC: "cifs",
	unix.FUSE_SUPER_MAGIC: "fuse",
	unix.V9FS_MAGIC:       "9p",
	unix.CEPH_SUPER_MAGIC: "ceph",
	unix.AFS_SUPER_MAGIC:  "afs",
	unix.AFS_FS_MAGIC:     "afs",
	unix.CODA_SUPER_MAGIC: "coda",
	unix.NCP_SUPER_MAGIC:  "ncp",
	0x47504653:            "gpfs",
	0x0BD00BD0:            "lustre",
}
