// Package filesystem implements envd's filesystem.Filesystem Connect service
// (shared/specs/e2b-protocol.md §3.5): stat, list, create, move and remove
// paths inside the sandbox, and watch directories either as a server stream
// (WatchDir, used by the JS and async Python SDKs) or as a polled watcher
// (CreateWatcher/GetWatcherEvents/RemoveWatcher, used by the sync Python SDK).
//
// envd runs as root inside the sandbox, so the handlers do not drop
// privileges: the request's user only decides how relative paths resolve and
// who owns what the service creates, as in E2B's reference envd.
package filesystem

import (
	"log/slog"
	"net/http"
	"sync"

	"connectrpc.com/connect"

	"github.com/hutch-sandbox/hutch/api/gen/filesystem/filesystemconnect"
	"github.com/hutch-sandbox/hutch/internal/envd/config"
	"github.com/hutch-sandbox/hutch/internal/envd/envderr"
	"github.com/hutch-sandbox/hutch/internal/envd/permissions"
)

// Service implements filesystemconnect.FilesystemHandler. It is exported so
// that tests and the server can own its lifetime (Close releases the polled
// watchers); most callers only need Handle.
type Service struct {
	st     *config.State
	logger *slog.Logger

	mu       sync.Mutex
	watchers map[string]*pollWatcher // CreateWatcher ids → live watchers
}

// Every RPC is implemented here: a missing one must fail to compile rather
// than answer unimplemented to an SDK that relies on it.
var _ filesystemconnect.FilesystemHandler = (*Service)(nil)

// NewService returns the service reading defaults (user, workdir) from st.
// A nil logger discards logs.
func NewService(st *config.State, logger *slog.Logger) *Service {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Service{st: st, logger: logger, watchers: map[string]*pollWatcher{}}
}

// Handle mounts the filesystem.Filesystem service on mux. Polled watchers
// live as long as the process, which matches envd's lifetime.
func Handle(mux *http.ServeMux, st *config.State, logger *slog.Logger) {
	mux.Handle(NewService(st, logger).Handler())
}

// Handler returns the service's path and its Connect handler. Handlers
// return errors as they classify them; the handler's interceptor
// (envderr.Interceptor) turns them into Connect codes, the only place
// that does.
func (s *Service) Handler() (string, http.Handler) {
	return filesystemconnect.NewFilesystemHandler(s, connect.WithInterceptors(envderr.Interceptor()))
}

// Close stops every polled watcher, releasing their inotify instances.
func (s *Service) Close() {
	s.mu.Lock()
	ws := s.watchers
	s.watchers = map[string]*pollWatcher{}
	s.mu.Unlock()
	for _, w := range ws {
		w.close()
	}
}

// user resolves the user a request acts as: the Basic Authorization header,
// else envd's default user. Its errors wrap permissions.ErrUnknownUser.
func (s *Service) user(h http.Header) (*permissions.User, error) {
	return permissions.UserFromHeader(h, s.st.DefaultUser())
}

// userAndPath resolves the request's user and turns path into an absolute,
// clean path for that user (~, relative → workdir or home).
func (s *Service) userAndPath(h http.Header, path string) (*permissions.User, string, error) {
	u, err := s.user(h)
	if err != nil {
		return nil, "", err
	}
	p, err := permissions.ExpandAndResolve(path, u, s.st.DefaultWorkdir())
	if err != nil {
		return nil, "", err
	}
	return u, p, nil
}
