package sdk

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hutch-sandbox/hutch/api/gen/filesystem"
)

// EventType is the kind of a file system event.
type EventType string

// Event types.
const (
	EventCreate EventType = "create"
	EventWrite  EventType = "write"
	EventRemove EventType = "remove"
	EventRename EventType = "rename"
	EventChmod  EventType = "chmod"
)

// FilesystemEvent is one change under a watched directory.
type FilesystemEvent struct {
	// Name is the path relative to the watched directory ("sub/file").
	Name string `json:"name"`
	// Type says what happened.
	Type EventType `json:"type"`
	// Entry describes the entry after create, write and chmod events when
	// the watch asked for it.
	Entry *EntryInfo `json:"entry,omitempty"`
}

// WatchOptions configure [Files.WatchDir].
type WatchOptions struct {
	// Recursive watches subdirectories too.
	Recursive bool
	// IncludeEntry adds an EntryInfo to create, write and chmod events.
	IncludeEntry bool
	// User watches as this sandbox user.
	User string
	// Timeout ends the watch after this long; 0 means
	// DefaultCommandTimeout and NoTimeout means none.
	Timeout time.Duration
}

// WatchHandle is a running watch.
type WatchHandle struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	err    error
}

// Stop ends the watch; events already being delivered finish first.
func (w *WatchHandle) Stop() { w.cancel() }

// Done is closed when the watch has ended.
func (w *WatchHandle) Done() <-chan struct{} { return w.done }

// Err reports why the watch ended: nil after Stop, an error matching
// ErrTimeout when its Timeout passed, or the failure.
func (w *WatchHandle) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// WatchDir watches the directory at path and calls onEvent, from one
// goroutine, for each change. It returns once the watch is in place, so
// changes made after it returns are seen. ctx bounds only the setup.
func (f *Files) WatchDir(ctx context.Context, path string, onEvent func(FilesystemEvent), opts *WatchOptions) (*WatchHandle, error) {
	if opts == nil {
		opts = &WatchOptions{}
	}
	op := "watch " + path
	parent := context.WithoutCancel(ctx)
	var sctx context.Context
	var cancel context.CancelFunc
	switch {
	case opts.Timeout == 0:
		sctx, cancel = context.WithTimeout(parent, DefaultCommandTimeout)
	case opts.Timeout < 0:
		sctx, cancel = context.WithCancel(parent)
	default:
		sctx, cancel = context.WithTimeout(parent, opts.Timeout)
	}
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	msg := &filesystem.WatchDirRequest{Path: path, Recursive: opts.Recursive, IncludeEntry: opts.IncludeEntry}
	stream, err := f.envd.fs.WatchDir(sctx, streamRequest(msg, opts.User))
	if err != nil {
		cancel()
		return nil, streamStartError(ctx, op, err)
	}
	if !stream.Receive() || stream.Msg().GetStart() == nil {
		err := stream.Err()
		stream.Close()
		cancel()
		if err == nil {
			err = &Error{Op: op, Message: "protocol error: the watch did not start"}
		}
		return nil, streamStartError(ctx, op, err)
	}
	if !stop() {
		stream.Close()
		cancel()
		return nil, streamStartError(ctx, op, ctx.Err())
	}
	w := &WatchHandle{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer cancel()
		defer stream.Close()
		for stream.Receive() {
			ev := stream.Msg().GetFilesystem()
			if ev == nil {
				continue // keepalive
			}
			if t := eventType(ev.GetType()); t != "" && onEvent != nil {
				onEvent(FilesystemEvent{Name: ev.GetName(), Type: t, Entry: entryOf(ev.GetEntry())})
			}
		}
		err := stream.Err()
		switch {
		case err == nil:
		case sctx.Err() == context.Canceled:
			err = nil // stopped
		default:
			err = rpcError(op, err)
			if errors.Is(sctx.Err(), context.DeadlineExceeded) {
				err = &Error{Op: op, Kind: ErrTimeout, Err: context.DeadlineExceeded, Message: "the watch's timeout passed"}
			}
		}
		w.mu.Lock()
		w.err = err
		w.mu.Unlock()
	}()
	return w, nil
}

func eventType(t filesystem.EventType) EventType {
	switch t {
	case filesystem.EventType_EVENT_TYPE_CREATE:
		return EventCreate
	case filesystem.EventType_EVENT_TYPE_WRITE:
		return EventWrite
	case filesystem.EventType_EVENT_TYPE_REMOVE:
		return EventRemove
	case filesystem.EventType_EVENT_TYPE_RENAME:
		return EventRename
	case filesystem.EventType_EVENT_TYPE_CHMOD:
		return EventChmod
	}
	return ""
}
