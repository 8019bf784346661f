// Package process is envd's process.Process Connect service (E2B protocol,
// shared/specs/e2b-protocol.md §3.4): it starts commands and PTYs as the
// requesting user, streams their output, and lets later requests attach to,
// feed, resize and signal them.
//
// A process's life is independent of the streams watching it: closing or
// cancelling a stream never kills a process. Only the deadline of the Start
// call that created it (Connect-Timeout-Ms) does.
package process

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"

	pb "github.com/hutch-sandbox/hutch/api/gen/process"
	"github.com/hutch-sandbox/hutch/api/gen/process/processconnect"
	"github.com/hutch-sandbox/hutch/internal/envd/config"
	"github.com/hutch-sandbox/hutch/internal/envd/envderr"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// Service implements processconnect.ProcessHandler. The zero value is not
// usable; Handle builds one.
type Service struct {
	processconnect.UnimplementedProcessHandler

	st     *config.State
	logger *slog.Logger

	mu    sync.Mutex
	procs map[uint32]*proc
}

// Handle mounts the process service on mux. Its handlers return errors as
// they classify them (errdefs classes, envderr's, permissions'); the
// handler's interceptor (envderr.Interceptor) turns them into Connect
// codes, the only place that does.
func Handle(mux *http.ServeMux, st *config.State, logger *slog.Logger) *Service {
	s := &Service{st: st, logger: logger, procs: map[uint32]*proc{}}
	mux.Handle(processconnect.NewProcessHandler(s, connect.WithInterceptors(envderr.Interceptor())))
	return s
}

// lookup finds a process by selector; ended processes stay findable by pid
// until retention runs out, so Connect can report how they ended.
func (s *Service) lookup(sel *pb.ProcessSelector) (*proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch v := sel.GetSelector().(type) {
	case *pb.ProcessSelector_Pid:
		if p, ok := s.procs[v.Pid]; ok {
			return p, nil
		}
		return nil, errdefs.Mark(fmt.Errorf("process with pid %d not found", v.Pid), errdefs.ErrNotFound)
	case *pb.ProcessSelector_Tag:
		for _, p := range s.procs {
			if p.tag != nil && *p.tag == v.Tag && !p.ended() {
				return p, nil
			}
		}
		return nil, errdefs.Mark(fmt.Errorf("process with tag %q not found", v.Tag), errdefs.ErrNotFound)
	}
	return nil, errdefs.Mark(errors.New("no process selector"), errdefs.ErrInvalidArgument)
}

func (s *Service) add(p *proc) {
	s.mu.Lock()
	s.procs[p.pid] = p
	s.mu.Unlock()
}

// forget drops an ended process once late Connect calls are unlikely.
func (s *Service) forget(p *proc, after time.Duration) {
	time.AfterFunc(after, func() {
		s.mu.Lock()
		if s.procs[p.pid] == p {
			delete(s.procs, p.pid)
		}
		s.mu.Unlock()
	})
}

// keepaliveInterval reads Keepalive-Ping-Interval (seconds); the reference
// envd's default is 90 s.
func keepaliveInterval(h http.Header) time.Duration {
	if v, err := strconv.Atoi(h.Get("Keepalive-Ping-Interval")); err == nil && v > 0 {
		return time.Duration(v) * time.Second
	}
	return 90 * time.Second
}
