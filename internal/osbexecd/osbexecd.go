// Package osbexecd serves OpenSandbox's in-sandbox API ("execd",
// specs/execd-api.yaml of opensandbox-group/OpenSandbox) for Hutch's
// sandboxes from the host, by translating every call to the sandbox's own
// envd: commands become process.Process Start/SendSignal streams, files
// go through envd's /files and filesystem.Filesystem. No daemon runs in
// the sandbox and no port is added to it; beside each background command
// a shell keeps its output in the sandbox's files (bglog.go), so that the
// host spends nothing on output no client asks for.
//
// Paths mean what they mean to envd: absolute inside the sandbox, ".."
// cleaned, links followed inside the sandbox's mount namespace, so the
// sandbox's root is the only root a request can reach. The handler never
// touches the host's file system for a request.
//
// What execd does that envd cannot is answered with a clear error in
// execd's shape: code contexts (a Jupyter kernel), PTY sessions,
// caller-bound operations, isolated sessions and per-identity file access.
package osbexecd

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Envd is how the host reaches one sandbox's envd.
type Envd struct {
	// Transport reaches envd (port 49983); the request URL's host is
	// ignored.
	Transport http.RoundTripper
	// Token is envd's access token (header X-Access-Token), "" when it
	// has none.
	Token string
	// Metrics, when set, is the sandbox's latest sample as the host
	// measures it (its cgroup: the cores and memory it was granted),
	// false when there is none yet; GET /metrics answers it instead of
	// envd's view from inside, which sees the host's memory.
	Metrics func(ctx context.Context) (Metrics, bool)
	// Tenant names whose sandbox it is (its API key): bounds the whole
	// server's requests share are fair between tenants (shares).
	Tenant string
}

// Metrics is one sample of a sandbox's use, as execd's GET /metrics
// reports it.
type Metrics struct {
	CPUCount    float64
	CPUUsedPct  float64
	MemTotalMiB float64
	MemUsedMiB  float64
}

// Options configures a Handler. Every zero field takes the default its
// comment names.
type Options struct {
	// Logger receives what the handler does not return to a client
	// (background commands that lost their stream, say); nil discards.
	Logger *slog.Logger
	// User is the sandbox user requests act as when they name no uid:
	// commands run as it, and files it writes belong to it unless the
	// request names an owner. Default "root", as OpenSandbox's execd runs.
	User string
	// MaxBodyBytes bounds a JSON request body. Default 1 MiB.
	MaxBodyBytes int64
	// MaxUploadBytes bounds a POST /files/upload body. Default 10 GiB
	// (envd's own limit).
	MaxUploadBytes int64
	// MaxReplaceBytes bounds the total size of the files one POST
	// /files/replace may rewrite, since they pass through the host's
	// memory, and their total size after the replacement. Requests
	// together hold at most four times this; more wait. Default 64 MiB.
	MaxReplaceBytes int64
	// MaxCommandLog is how much output of one background command the
	// sandbox keeps, on its own disk, for GET /command/{id}/logs: the
	// last half of it to all of it (two files of half this size); older
	// output is dropped, and the logs say so. One GET answers at most
	// this much. Default 1 MiB.
	MaxCommandLog int
	// MaxSandboxLog bounds the output kept for the background commands of
	// one sandbox together, each counted at MaxCommandLog: past it, the
	// output of the oldest finished commands is removed when a command
	// starts (running commands keep theirs). Default 16 MiB.
	MaxSandboxLog int
	// MaxCommands bounds the commands one sandbox keeps a status for;
	// past it the oldest finished one is forgotten, and a new command is
	// refused while all are running. Default 1024.
	MaxCommands int
	// MaxSessions bounds the bash sessions of one sandbox. Default 64.
	MaxSessions int
	// MetricsInterval is the period of GET /metrics/watch. Default 1 s,
	// as the spec says.
	MetricsInterval time.Duration
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.User == "" {
		o.User = "root"
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 1 << 20
	}
	if o.MaxUploadBytes <= 0 {
		o.MaxUploadBytes = 10 << 30
	}
	if o.MaxReplaceBytes <= 0 {
		o.MaxReplaceBytes = 64 << 20
	}
	if o.MaxCommandLog <= 0 {
		o.MaxCommandLog = 1 << 20
	}
	if o.MaxSandboxLog <= 0 {
		o.MaxSandboxLog = 16 << 20
	}
	if o.MaxSandboxLog < o.MaxCommandLog {
		o.MaxSandboxLog = o.MaxCommandLog
	}
	if o.MaxCommands <= 0 {
		o.MaxCommands = 1024
	}
	if o.MaxSessions <= 0 {
		o.MaxSessions = 64
	}
	if o.MetricsInterval <= 0 {
		o.MetricsInterval = time.Second
	}
	return o
}

// Handler serves execd's API for any number of sandboxes. It keeps, per
// sandbox, the commands it started (their status; background commands'
// output stays in the sandbox) and the bash sessions; Forget drops them.
// It is safe for concurrent use.
type Handler struct {
	opts Options
	log  *slog.Logger

	routes []route

	// replaceMem bounds the files all POST /files/replace requests hold
	// in the host's memory at once (replaceInFlight).
	replaceMem *shares
	// listings bounds the envd listings (ListDir answers, up to
	// maxListingBytes each) all requests hold at once.
	listings *shares

	mu        sync.Mutex
	sandboxes map[string]*sandboxState
}

// replaceInFlight is how many requests' worth of MaxReplaceBytes all
// replacements may hold at once; more wait for their turn, for at most
// shareWait.
const replaceInFlight = 4

// listingsInFlight is how many envd listings all requests may hold at
// once (listingsInFlight × maxListingBytes of the host's memory).
const listingsInFlight = 4

// shareWait is the longest a request waits for its share of a bound the
// whole server's requests share (replaceInFlight, listingsInFlight): past
// it the answer is a 429, so that one tenant holding the shares (a sandbox
// whose envd it stopped, a client that stopped reading) delays the others
// by at most this, never for as long as it likes.
const shareWait = 10 * time.Second

// replaceDeadline bounds a whole replacement: reading the files, writing
// them back.
const replaceDeadline = 2 * time.Minute

// holdListing takes the request's share of the server's listings, once,
// waiting at most shareWait: a listing and what is made of it stay in the
// host's memory until the answer is written, however slowly the client
// reads it.
func (c *call) holdListing(ctx context.Context) error {
	if c == nil || c.listings == nil || c.holding {
		return nil
	}
	if err := c.listings.acquire(ctx, c.envd.Tenant, 1); err != nil {
		return err
	}
	c.holding = true
	return nil
}

// release gives back what the request held.
func (c *call) release() {
	if c.holding {
		c.listings.release(c.envd.Tenant, 1)
		c.holding = false
	}
}

// New returns a Handler with opts.
func New(opts Options) *Handler {
	opts = opts.withDefaults()
	return &Handler{opts: opts, log: opts.Logger, routes: routeTable(), sandboxes: map[string]*sandboxState{},
		replaceMem: newShares(replaceInFlight * opts.MaxReplaceBytes), listings: newShares(listingsInFlight)}
}

// sandboxState is what the handler keeps for one sandbox.
type sandboxState struct {
	id string
	// ctx bounds the work that outlives a request (commands' streams);
	// Forget cancels it.
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	commands map[string]*command
	order    []*command // oldest first
	sessions map[string]*session
}

// state returns sandbox id's state, making it on first use.
func (h *Handler) state(id string) *sandboxState {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.sandboxes[id]
	if st == nil {
		ctx, cancel := context.WithCancel(context.Background())
		st = &sandboxState{id: id, ctx: ctx, cancel: cancel, commands: map[string]*command{}, sessions: map[string]*session{}}
		h.sandboxes[id] = st
	}
	return st
}

// Forget drops what the handler keeps for sandbox id (commands,
// sessions) once the sandbox is gone, and stops following its commands'
// streams. The files of background commands' output went with the
// sandbox.
func (h *Handler) Forget(id string) {
	h.mu.Lock()
	st := h.sandboxes[id]
	delete(h.sandboxes, id)
	h.mu.Unlock()
	if st != nil {
		st.cancel()
	}
}

// call is one request being served.
type call struct {
	id   string
	envd Envd
	// listings is the handler's bound on listings; holding is whether
	// this request holds a share of it, which it keeps until its answer
	// is written (release).
	listings *shares
	holding  bool
	// st is the sandbox's state, for /command and /session requests only.
	st     *sandboxState
	params map[string]string
}

type handlerFunc func(h *Handler, w http.ResponseWriter, r *http.Request, c *call)

// route is one path of the API: pattern segments, "{name}" capturing one.
type route struct {
	pattern string
	methods map[string]handlerFunc
}

// routeTable is the API as the spec lists it. Paths that execd serves and
// envd cannot back answer with a clear error (unsupported.go).
func routeTable() []route {
	return []route{
		{"/ping", map[string]handlerFunc{"GET": (*Handler).ping}},
		{"/metrics", map[string]handlerFunc{"GET": (*Handler).metrics}},
		{"/metrics/watch", map[string]handlerFunc{"GET": (*Handler).watchMetrics}},

		{"/command", map[string]handlerFunc{"POST": (*Handler).runCommand, "DELETE": (*Handler).interruptCommand}},
		{"/command/status/{id}", map[string]handlerFunc{"GET": (*Handler).commandStatus}},
		{"/command/{id}/logs", map[string]handlerFunc{"GET": (*Handler).commandLogs}},
		{"/command/operations", map[string]handlerFunc{"POST": notImplemented(msgOperations)}},
		{"/execution/instance", map[string]handlerFunc{"GET": notImplemented(msgOperations)}},
		{"/execution/operation", map[string]handlerFunc{"GET": notImplemented(msgOperations)}},

		{"/session", map[string]handlerFunc{"POST": (*Handler).createSession}},
		{"/session/{id}", map[string]handlerFunc{"DELETE": (*Handler).deleteSession}},
		{"/session/{id}/run", map[string]handlerFunc{"POST": (*Handler).runInSession}},

		{"/files", map[string]handlerFunc{"DELETE": (*Handler).removeFiles}},
		{"/files/info", map[string]handlerFunc{"GET": (*Handler).filesInfo}},
		{"/files/download", map[string]handlerFunc{"GET": (*Handler).download}},
		{"/files/upload", map[string]handlerFunc{"POST": (*Handler).upload}},
		{"/files/search", map[string]handlerFunc{"GET": (*Handler).searchFiles}},
		{"/files/permissions", map[string]handlerFunc{"POST": (*Handler).chmodFiles}},
		{"/files/mv", map[string]handlerFunc{"POST": (*Handler).moveFiles}},
		{"/files/replace", map[string]handlerFunc{"POST": (*Handler).replaceContent}},
		{"/directories", map[string]handlerFunc{"POST": (*Handler).makeDirs, "DELETE": (*Handler).removeDirs}},
		{"/directories/list", map[string]handlerFunc{"GET": (*Handler).listDirectory}},

		{"/code", map[string]handlerFunc{"POST": notImplemented(msgCode), "DELETE": notImplemented(msgCode)}},
		{"/code/context", map[string]handlerFunc{"POST": notImplemented(msgCode)}},
		{"/code/contexts", map[string]handlerFunc{"GET": notImplemented(msgCode), "DELETE": notImplemented(msgCode)}},
		{"/code/contexts/{id}", map[string]handlerFunc{"GET": notImplemented(msgCode), "DELETE": notImplemented(msgCode)}},

		{"/pty", map[string]handlerFunc{"POST": notImplemented(msgPTY)}},
		{"/pty/operations", map[string]handlerFunc{"POST": notImplemented(msgPTY)}},
		{"/pty/{id}", map[string]handlerFunc{"GET": notImplemented(msgPTY), "DELETE": notImplemented(msgPTY)}},
		{"/pty/{id}/ws", map[string]handlerFunc{"GET": notImplemented(msgPTY)}},

		{"/v1/isolated/capabilities", map[string]handlerFunc{"GET": (*Handler).isolatedCapabilities}},
	}
}

// Serve answers execd request r for sandbox id; r.URL.Path is execd's own
// path ("/ping", "/command", "/files/download", ...). Authentication was
// done by the caller. An unknown path is 404 and a known path with another
// method 405, both in execd's error shape.
func (h *Handler) Serve(w http.ResponseWriter, r *http.Request, id string, e Envd) {
	path := r.URL.Path
	if len(path) > 4096 {
		writeError(w, http.StatusRequestURITooLong, codeInvalidRequest, "the path is too long")
		return
	}
	segs := splitPath(path)
	switch {
	case len(segs) >= 2 && segs[0] == "v1" && segs[1] == "isolated" && path != "/v1/isolated/capabilities":
		writeError(w, http.StatusServiceUnavailable, codeNotSupported, msgIsolated)
		return
	case len(segs) >= 2 && segs[0] == "v1" && segs[1] == "filesystem":
		writeError(w, http.StatusNotImplemented, codeNotSupported, msgIdentity)
		return
	}
	for _, rt := range h.routes {
		params, ok := matchRoute(rt.pattern, segs)
		if !ok {
			continue
		}
		fn := rt.methods[r.Method]
		if fn == nil && r.Method == http.MethodHead {
			fn = rt.methods[http.MethodGet]
		}
		if fn == nil {
			allowed := make([]string, 0, len(rt.methods))
			for m := range rt.methods {
				allowed = append(allowed, m)
			}
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			writeError(w, http.StatusMethodNotAllowed, codeMethodNotAllowed, r.Method+" is not allowed on "+path)
			return
		}
		c := &call{id: id, envd: e, params: params, listings: h.listings}
		defer c.release()
		if len(segs) > 0 && (segs[0] == "command" || segs[0] == "session") {
			// Only commands and sessions keep state: a file request for
			// a sandbox that is gone leaves nothing behind.
			c.st = h.state(id)
		}
		fn(h, w, r, c)
		return
	}
	writeError(w, http.StatusNotFound, codeNotFound, "no such endpoint: "+path)
}

// splitPath splits an absolute path into its segments; "" and "/" have
// none. Empty segments ("//") are kept, so they match nothing.
func splitPath(p string) []string {
	p = strings.TrimPrefix(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// matchRoute matches segs against pattern, returning the {name} captures.
func matchRoute(pattern string, segs []string) (map[string]string, bool) {
	pat := splitPath(pattern)
	if len(pat) != len(segs) {
		return nil, false
	}
	var params map[string]string
	for i, p := range pat {
		if strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}") {
			if segs[i] == "" {
				return nil, false
			}
			if params == nil {
				params = map[string]string{}
			}
			params[p[1:len(p)-1]] = segs[i]
			continue
		}
		if p != segs[i] {
			return nil, false
		}
	}
	return params, true
}
