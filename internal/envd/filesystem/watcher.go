package filesystem

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"sync"

	"connectrpc.com/connect"

	pb "github.com/hutch-sandbox/hutch/api/gen/filesystem"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// maxPendingEvents bounds what a polled watcher buffers between two
// GetWatcherEvents calls, so a client that stops polling without calling
// RemoveWatcher cannot grow envd's memory without limit. The oldest events
// are dropped first: the newest state of the tree matters most.
const maxPendingEvents = 10000

// pollWatcher is a dirWatcher whose events are buffered until the client
// polls for them (the Python SDK's synchronous watch_dir).
type pollWatcher struct {
	dw   *dirWatcher
	stop chan struct{}
	done chan struct{}
	once sync.Once

	mu      sync.Mutex
	events  []*pb.FilesystemEvent
	err     error // the failure that stopped the watcher, reported on poll
	dropped int
}

func startPollWatcher(dw *dirWatcher) *pollWatcher {
	pw := &pollWatcher{dw: dw, stop: make(chan struct{}), done: make(chan struct{})}
	go pw.run()
	return pw
}

// run collects events until close or a watcher failure; either way it
// releases the fsnotify watcher before returning.
func (pw *pollWatcher) run() {
	defer close(pw.done)
	defer pw.dw.close()
	for {
		select {
		case <-pw.stop:
			return
		case err, ok := <-pw.dw.fw.Errors:
			if !ok {
				return
			}
			pw.mu.Lock()
			pw.err = fmt.Errorf("watch %s: %w", pw.dw.root, err)
			pw.mu.Unlock()
			return
		case ev, ok := <-pw.dw.fw.Events:
			if !ok {
				return
			}
			fes := pw.dw.translate(ev)
			if len(fes) == 0 {
				continue
			}
			pw.mu.Lock()
			pw.events = append(pw.events, fes...)
			if over := len(pw.events) - maxPendingEvents; over > 0 {
				if pw.dropped == 0 {
					pw.dw.logger.Warn("watcher is not polled; dropping oldest events", "path", pw.dw.root)
				}
				pw.dropped += over
				pw.events = append([]*pb.FilesystemEvent(nil), pw.events[over:]...)
			}
			pw.mu.Unlock()
		}
	}
}

// drain returns and clears the buffered events. Once they are all out, a
// failed watcher returns its failure instead, so the events that preceded
// the failure are not lost with it.
func (pw *pollWatcher) drain() ([]*pb.FilesystemEvent, error) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if pw.err != nil && len(pw.events) == 0 {
		return nil, pw.err
	}
	evs := pw.events
	pw.events = nil
	return evs, nil
}

// close stops the watcher and waits until its fsnotify watcher is released.
func (pw *pollWatcher) close() {
	pw.once.Do(func() { close(pw.stop) })
	<-pw.done
}

// newWatcherID returns "w" + random, the reference's id shape; ids are
// unguessable so one client cannot poll or stop another's watcher by luck.
func newWatcherID() string {
	return "w" + strings.ToLower(rand.Text())
}

// CreateWatcher starts a polled watcher with the same validation as
// WatchDir and returns its id.
func (s *Service) CreateWatcher(_ context.Context, req *connect.Request[pb.CreateWatcherRequest]) (*connect.Response[pb.CreateWatcherResponse], error) {
	_, path, err := s.userAndPath(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	dw, err := newDirWatcher(path, req.Msg.GetRecursive(), req.Msg.GetIncludeEntry(), req.Msg.GetAllowNetworkMounts(), s.logger)
	if err != nil {
		return nil, err
	}
	id := newWatcherID()
	pw := startPollWatcher(dw)
	s.mu.Lock()
	s.watchers[id] = pw
	s.mu.Unlock()
	return connect.NewResponse(&pb.CreateWatcherResponse{WatcherId: id}), nil
}

// GetWatcherEvents returns the events buffered since the previous call.
// A watcher that failed reports its failure here, since polling is the only
// moment the client hears from it.
func (s *Service) GetWatcherEvents(_ context.Context, req *connect.Request[pb.GetWatcherEventsRequest]) (*connect.Response[pb.GetWatcherEventsResponse], error) {
	pw, err := s.watcher(req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	evs, err := pw.drain()
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.GetWatcherEventsResponse{Events: evs}), nil
}

// RemoveWatcher stops a polled watcher and forgets its id.
func (s *Service) RemoveWatcher(_ context.Context, req *connect.Request[pb.RemoveWatcherRequest]) (*connect.Response[pb.RemoveWatcherResponse], error) {
	id := req.Msg.GetWatcherId()
	s.mu.Lock()
	pw, ok := s.watchers[id]
	delete(s.watchers, id)
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("watcher %q: %w", id, errdefs.ErrNotFound)
	}
	pw.close()
	return connect.NewResponse(&pb.RemoveWatcherResponse{}), nil
}

func (s *Service) watcher(id string) (*pollWatcher, error) {
	s.mu.Lock()
	pw, ok := s.watchers[id]
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("watcher %q: %w", id, errdefs.ErrNotFound)
	}
	return pw, nil
}
