// Package envd is Hutch's in-sandbox daemon, speaking E2B's envd protocol
// (shared/specs/e2b-protocol.md §3) so that the official E2B SDKs drive
// Hutch sandboxes unchanged: the process.Process and filesystem.Filesystem
// Connect services, /files, /health, /init, /envs and /metrics.
//
// envd runs inside the sandbox as its first process (the hutch binary
// itself, `hutch envd`). It serves up to three listeners:
//
//	control  a unix socket the host made and passed in: the host's own
//	         way in. Only it serves POST /init (which sets the access
//	         token) and CONNECT (tunnels to the sandbox's other ports).
//	api      a second host socket: what the host's edge router forwards
//	         clients to. Everything on it, CONNECT included, needs the
//	         access token first (but /health, and /files, which checks
//	         tokens or URL signatures itself).
//	TCP      port 49983 in the sandbox's own network namespace, served as
//	         the api socket is.
package envd

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	processpb "github.com/hutch-sandbox/hutch/api/gen/process"
	"github.com/hutch-sandbox/hutch/internal/cabundle"
	"github.com/hutch-sandbox/hutch/internal/envd/config"
	"github.com/hutch-sandbox/hutch/internal/envd/envderr"
	"github.com/hutch-sandbox/hutch/internal/envd/files"
	"github.com/hutch-sandbox/hutch/internal/envd/filesystem"
	"github.com/hutch-sandbox/hutch/internal/envd/process"
	"github.com/hutch-sandbox/hutch/internal/envdapi"
	"github.com/hutch-sandbox/hutch/internal/runtime/gvisor/link"
)

// Options configure a Server.
type Options struct {
	// DefaultUser is the user of requests that name none (the template's).
	DefaultUser string
	// Logger receives envd's log; nil discards it.
	Logger *slog.Logger
	// TunnelLinger is how long a tunnel whose one way has ended may stay
	// idle in the other before both close; zero means splice.DefaultLinger.
	TunnelLinger time.Duration
	// MaxTunnels bounds the tunnels (CONNECT) open at once; more are
	// answered 503. Zero means DefaultMaxTunnels.
	MaxTunnels int
	// Root is the root file system /init installs CA certificates in;
	// "" means "/", the sandbox's (tests name another).
	Root string
}

// DefaultMaxTunnels is the default of Options.MaxTunnels: some 6000 of
// envd's descriptors (about six a tunnel) of the 20 000 or more it has,
// leaving the rest for the commands and files it serves.
const DefaultMaxTunnels = 1024

// Server is one envd. Its handlers are safe for concurrent use.
type Server struct {
	st      *config.State
	logger  *slog.Logger
	mux     *http.ServeMux
	linger  time.Duration // of tunnels
	tunnels chan struct{} // a slot for each open tunnel
	root    string        // where /init installs CA certificates
	warm    sync.Once     // warmUp, after the first /init
}

// New returns an envd serving the sandbox it runs in.
func New(opts Options) *Server {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{st: config.New(envdapi.Version, opts.DefaultUser), logger: logger, mux: http.NewServeMux(), linger: opts.TunnelLinger, root: opts.Root}
	if s.root == "" {
		s.root = "/"
	}
	if opts.MaxTunnels <= 0 {
		opts.MaxTunnels = DefaultMaxTunnels
	}
	s.tunnels = make(chan struct{}, opts.MaxTunnels)
	process.Handle(s.mux, s.st, logger)
	filesystem.Handle(s.mux, s.st, logger)
	files.Handle(s.mux, s.st, logger)
	s.mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	// 204 when the request's X-Access-Token is the sandbox's (or it has
	// none), 401 otherwise (requireToken): how servers in the sandbox that
	// SDKs send the token to check it, as E2B's envd serves it for its code
	// interpreter.
	s.mux.HandleFunc("GET /auth", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	s.mux.HandleFunc("GET /envs", s.envs)
	s.mux.HandleFunc("GET /metrics", s.metrics)
	return s
}

// State is the server's run-time configuration.
func (s *Server) State() *config.State { return s.st }

// Handler returns the HTTP handler for one listener; control is true for
// the host's control socket, the only one that serves POST /init and
// CONNECT (the tunnel to the sandbox's other ports). On every listener the
// access token, once set, is checked before anything else, for every
// method: the token check comes first, then routing.
func (s *Server) Handler(control bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", s.mux)
	if control {
		mux.HandleFunc("POST /init", s.init)
	}
	return s.requireToken(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			mux.ServeHTTP(w, r)
			return
		}
		if !control {
			w.Header().Set("Allow", "GET, POST, PUT, DELETE")
			envderr.Write(w, http.StatusMethodNotAllowed, "CONNECT is not served here")
			return
		}
		s.tunnel(w, r)
	}))
}

// Serve serves control (the host's control socket), api (the host's API
// socket; may be nil) and sandbox (TCP inside the sandbox; may be nil)
// until ctx ends, then shuts down gracefully.
func (s *Server) Serve(ctx context.Context, control, api, sandbox net.Listener) error {
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	// h2c for clients that speak it; the SDKs use HTTP/1.1 on plain HTTP.
	protocols.SetUnencryptedHTTP2(true)
	newServer := func(h http.Handler) *http.Server {
		return &http.Server{Handler: h, Protocols: protocols, ReadHeaderTimeout: 30 * time.Second, ErrorLog: slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn)}
	}
	servers := []*http.Server{newServer(s.Handler(true))}
	listeners := []net.Listener{control}
	for _, ln := range []net.Listener{api, sandbox} {
		if ln != nil {
			servers = append(servers, newServer(s.Handler(false)))
			listeners = append(listeners, ln)
		}
	}
	errs := make(chan error, len(servers))
	for i, srv := range servers {
		go func() { errs <- srv.Serve(listeners[i]) }()
	}
	select {
	case err := <-errs:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, srv := range servers {
		srv.Shutdown(shutdown)
	}
	return nil
}

// maxInitBody bounds POST /init's body: the largest CA bundle, as JSON
// (every line break two bytes), and room for the rest.
const maxInitBody = 1<<20 + 2*cabundle.MaxSize

// unauthorized is the reference envd's answer to a missing or wrong token.
const unauthorized = "unauthorized access, please provide a valid access token or method signing if supported"

// requireToken enforces X-Access-Token when the sandbox has a token, for
// every method and path except GET /health and /files (which checks
// tokens or URL signatures itself). Once a token is set, POST /init needs
// it too (as E2B's envd): nobody can replace it without knowing it.
func (s *Server) requireToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := s.st.Token()
		open := r.Method != http.MethodConnect && (r.URL.Path == "/health" || r.URL.Path == "/files")
		if token == "" || open {
			next.ServeHTTP(w, r)
			return
		}
		if subtle.ConstantTimeCompare([]byte(r.Header.Get(envdapi.HeaderAccessToken)), []byte(token)) != 1 {
			envderr.Write(w, http.StatusUnauthorized, unauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// init sets the sandbox-wide defaults. It is served on the host's control
// socket only, so neither the sandbox nor a client of the edge router can
// change the access token.
func (s *Server) init(w http.ResponseWriter, r *http.Request) {
	var req envdapi.InitRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxInitBody))
	// An empty body changes nothing.
	if err := dec.Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		envderr.Write(w, http.StatusBadRequest, "invalid /init body: "+err.Error())
		return
	}
	// The certificates first: a sandbox that cannot trust them fails its
	// create rather than every TLS connection later.
	var caEnvs map[string]string
	if req.CABundle != "" {
		b, err := cabundle.Parse([]byte(req.CABundle))
		if err != nil {
			envderr.Write(w, http.StatusBadRequest, "invalid /init caBundle: "+err.Error())
			return
		}
		if caEnvs, err = cabundle.Install(s.root, b); err != nil {
			s.logger.Error("install the CA bundle", "err", err)
			envderr.Write(w, http.StatusInternalServerError, "install the CA bundle: "+err.Error())
			return
		}
	}
	if req.AccessToken != nil {
		s.st.SetToken(*req.AccessToken)
	}
	// The request's own variables win over the bundle's defaults.
	s.st.SetEnvs(caEnvs)
	s.st.SetEnvs(req.EnvVars)
	s.st.SetDefaults(req.DefaultUser, req.DefaultWorkdir)
	w.WriteHeader(http.StatusNoContent)
	// The host gives a sandbox to its client right after its /init: the
	// first command is coming.
	s.warm.Do(func() { go warmUp() })
}

// warmUp pays, ahead of the first command, what Go pays on the first start
// of a process: os/exec's probe of pidfd support, which forks a throwaway
// child (os.FindProcess runs the same probe), and the lazy set-up of the
// process service's protobuf messages. Measured: the first command in a
// fresh sandbox took ~2 ms more than the next ones (bench/README.md).
func warmUp() {
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		p.Release()
	}
	b, _ := proto.Marshal(&processpb.StartResponse{Event: &processpb.ProcessEvent{
		Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: 1}}}})
	proto.Unmarshal(b, &processpb.StartResponse{})
	proto.Unmarshal(nil, &processpb.StartRequest{})
}

func (s *Server) envs(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(s.st.Envs())
}

// Run serves envd inside a sandbox: on the listening control socket the
// host passed as descriptor controlFD, on its API socket apiFD (-1: none)
// and, unless listen is empty, on a TCP address in the sandbox's own
// network namespace. It returns when ctx ends.
func Run(ctx context.Context, opts Options, controlFD, apiFD int, listen string) error {
	// Not dumpable: the sandbox's root runs as envd's uid, and could
	// otherwise ptrace it or take its descriptors through /proc — the
	// host's control socket among them, through which it could answer
	// the host's own calls, and its access token.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("envd: set non-dumpable: %w", err)
	}
	var control, api, sandbox net.Listener
	if n := os.Getenv(link.EnvChannels); n != "" {
		// Read once: the processes envd starts do not inherit it.
		os.Unsetenv(link.EnvChannels)
		// On the gvisor runtime the host's sockets arrive as channels of
		// one link on stdin, in the order of the descriptors (see package
		// link): control, then API.
		control, api, err := linkListeners(n, controlFD, apiFD)
		if err != nil {
			return err
		}
		// And the TCP port in the sandbox, as on the native runtime:
		// servers in the sandbox ask it (GET /auth) whether a client's
		// token is the sandbox's.
		if listen != "" {
			if sandbox, err = net.Listen("tcp", listen); err != nil {
				return fmt.Errorf("envd: %w", err)
			}
		}
		srv := New(opts)
		srv.logger.Info("envd started", "version", envdapi.Version, "default_user", opts.DefaultUser, "link", true)
		return srv.Serve(ctx, control, api, sandbox)
	}
	control, err := fileListener(controlFD, "control")
	if err != nil {
		return err
	}
	if apiFD >= 0 {
		if api, err = fileListener(apiFD, "api"); err != nil {
			return err
		}
	}
	if listen != "" {
		if sandbox, err = net.Listen("tcp", listen); err != nil {
			return fmt.Errorf("envd: %w", err)
		}
	}
	srv := New(opts)
	srv.logger.Info("envd started", "version", envdapi.Version, "default_user", opts.DefaultUser)
	return srv.Serve(ctx, control, api, sandbox)
}

// linkListeners are the control and API listeners of a link on stdin
// with n channels: channel fd-3 is what descriptor fd would have been.
func linkListeners(n string, controlFD, apiFD int) (control, api net.Listener, _ error) {
	channels, err := strconv.Atoi(n)
	if err != nil || channels < 1 || channels > 8 || controlFD < 3 || controlFD-3 >= channels || apiFD-3 >= channels {
		return nil, nil, fmt.Errorf("envd: %s=%q does not fit descriptors %d and %d", link.EnvChannels, n, controlFD, apiFD)
	}
	// Non-blocking, so Go's poller drives it (and a read can wait on it
	// without a thread).
	if err := unix.SetNonblock(0, true); err != nil {
		return nil, nil, fmt.Errorf("envd: link: %w", err)
	}
	// os.Stdin stays open: descriptor 0 is the sandbox's end of the link,
	// which a restore rewires; the conn is a duplicate of it.
	raw, err := net.FileConn(os.Stdin)
	if err != nil {
		return nil, nil, fmt.Errorf("envd: link on stdin: %w", err)
	}
	g := link.NewGuest(raw, channels, slog.New(slog.DiscardHandler))
	control = g.Listener(byte(controlFD - 3))
	if apiFD >= 3 {
		api = g.Listener(byte(apiFD - 3))
	}
	return control, api, nil
}

func fileListener(fd int, name string) (net.Listener, error) {
	f := os.NewFile(uintptr(fd), name+".sock")
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("envd: %s socket (descriptor %d): %w", name, fd, err)
	}
	return ln, nil
}
