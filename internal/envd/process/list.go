package process

import (
	"context"
	"sort"

	"connectrpc.com/connect"

	pb "github.com/hutch-sandbox/hutch/api/gen/process"
)

// List implements process.Process/List: the running processes, each with
// the configuration it was started with.
func (s *Service) List(ctx context.Context, req *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	if _, err := s.user(req.Header()); err != nil {
		return nil, err
	}
	s.mu.Lock()
	out := &pb.ListResponse{}
	for _, p := range s.procs {
		if !p.ended() {
			out.Processes = append(out.Processes, &pb.ProcessInfo{Config: p.config, Pid: p.pid, Tag: p.tag})
		}
	}
	s.mu.Unlock()
	sort.Slice(out.Processes, func(i, j int) bool { return out.Processes[i].Pid < out.Processes[j].Pid })
	return connect.NewResponse(out), nil
}
