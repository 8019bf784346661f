package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/hutch-sandbox/hutch/internal/connlimit"
	"github.com/hutch-sandbox/hutch/internal/e2bapi"
)

// Client connections of `hutch serve`: how long it waits for them and how
// many it holds. Every client's connection holds a descriptor, and one
// routed to a sandbox a second one (its way to envd), so clients together
// must not hold all of them: the server needs its own for sandboxes'
// sockets and pipes, SQLite, idle connections to envd and the network's
// proxies.
const (
	// defaultIdleTimeout closes keep-alive connections idle this long. It
	// is longer than the clients' own (Go's 90 s, Node's and Python's few
	// seconds), so a client never sends a request on a connection the
	// server is closing.
	defaultIdleTimeout = 120 * time.Second
	// readHeaderTimeout is how long a request's headers may take to come,
	// a new connection's first included.
	readHeaderTimeout = 10 * time.Second
	// defaultConnsPerClient is high: SDKs and agents on the server's own
	// host all come from 127.0.0.1, and each running command streams on a
	// connection of its own.
	defaultConnsPerClient = 4096
)

// connFlags are serve's flags for client connections.
type connFlags struct {
	idleTimeout time.Duration
	perClient   int
	total       int
}

func (f *connFlags) register(fs *pflag.FlagSet) {
	fs.DurationVar(&f.idleTimeout, "idle-timeout", defaultIdleTimeout, "close a client's keep-alive connection after it has been idle this long between requests (0: never)")
	fs.IntVar(&f.perClient, "max-conns-per-client", defaultConnsPerClient, "client connections one address (IPv4, or IPv6 /64) may hold open at once, streams and WebSockets included; more are closed as they come, with a 503 when it fits (0: no cap). Behind a reverse proxy every client is the proxy's address")
	fs.IntVar(&f.total, "max-conns-total", 0, "client connections all addresses together may hold open at once; past it a new one replaces the connection idle longest, or is closed with a 503 when it fits and none is idle (0: a quarter of the open-file limit, RLIMIT_NOFILE, so that clients and their ways into sandboxes leave half of the server's descriptors to itself)")
}

// listen wraps ln in the flags' caps, and returns the HTTP server to serve
// it with.
func (f *connFlags) listen(ln net.Listener, h http.Handler, logger *slog.Logger) (net.Listener, *http.Server, error) {
	if f.perClient < 0 || f.total < 0 || f.idleTimeout < 0 {
		return nil, nil, fmt.Errorf("--max-conns-per-client, --max-conns-total and --idle-timeout cannot be negative")
	}
	limit, err := openFileLimit()
	if err != nil {
		return nil, nil, err
	}
	total := f.total
	if total == 0 {
		total = max(limit/4, 1)
	} else if total > limit/2 {
		logger.Warn("--max-conns-total leaves the server few descriptors of its own: each connection to a sandbox holds two",
			"max-conns-total", total, "open file limit", limit)
	}
	capped := connlimit.New(ln, connlimit.Options{
		PerClient:  f.perClient,
		Total:      total,
		OverClient: refusal("too many connections from this address: hutch serve --max-conns-per-client"),
		OverTotal:  refusal("too many connections: hutch serve --max-conns-total"),
		Logger:     logger,
	})
	logger.Info("client connections", "per client", f.perClient, "total", total, "idle timeout", f.idleTimeout)
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		// Zero would fall back to ReadTimeout (none): no idle timeout.
		IdleTimeout: f.idleTimeout,
		ConnState:   capped.ConnState,
	}
	if f.idleTimeout == 0 {
		srv.IdleTimeout = -1
	}
	return capped, srv, nil
}

// openFileLimit returns the soft RLIMIT_NOFILE, which Go's runtime raised
// to the hard limit at start.
func openFileLimit() (int, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, fmt.Errorf("RLIMIT_NOFILE: %w", err)
	}
	return int(min(rl.Cur, 1<<30)), nil
}

// refusal is the whole HTTP answer written to a connection over a cap
// before it is closed: a 503 in E2B's error shape.
func refusal(msg string) []byte {
	body, _ := json.Marshal(e2bapi.Error{Code: http.StatusServiceUnavailable, Message: msg})
	return fmt.Appendf(nil, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
}
