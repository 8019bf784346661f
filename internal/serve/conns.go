package serve

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"syscall"
	"time"

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
	// DefaultIdleTimeout closes keep-alive connections idle this long. It
	// is longer than the clients' own (Go's 90 s, Node's and Python's few
	// seconds), so a client never sends a request on a connection the
	// server is closing.
	DefaultIdleTimeout = 120 * time.Second
	// readHeaderTimeout is how long a request's headers may take to come,
	// a new connection's first included.
	readHeaderTimeout = 10 * time.Second
	// maxHeaderBytes bounds a request's line and headers. Go's default, 1
	// MiB, let one client hold ~2.5 MB of the server's memory per
	// unfinished request, 1.8 GB with a thousand connections (review 8);
	// the SDKs send a few hundred bytes, and a signed URL's path is
	// bounded at 4 KiB. (net/http allows 4 KiB more, and answers past it
	// with its own plain-text 431 before any handler runs.)
	maxHeaderBytes = 64 << 10
	// DefaultConnsPerClient is high: SDKs and agents on the server's own
	// host all come from 127.0.0.1, and each running command streams on a
	// connection of its own.
	DefaultConnsPerClient = 4096
	// maxStreamsPerConn bounds the requests one HTTP/2 connection carries
	// at once.
	maxStreamsPerConn = 64
)

// Serve serves srv (from Listen) on ln until it is shut down: TLS when
// srv has a TLS configuration. A plain-HTTP request on a TLS listener is
// answered 400 by net/http ("Client sent an HTTP request to an HTTPS
// server"), not left hanging.
func Serve(srv *http.Server, ln net.Listener) error {
	if srv.TLSConfig != nil {
		return srv.ServeTLS(ln, "", "")
	}
	return srv.Serve(ln)
}

// ConnOptions bound a server's client connections (hutch serve's
// --idle-timeout, --max-conns-per-client, --max-conns-total).
type ConnOptions struct {
	// IdleTimeout closes a keep-alive connection idle this long; 0: never.
	IdleTimeout time.Duration
	// StallTimeout ends a request one write of whose answer the client
	// has not taken for this long; 0: DefaultStallTimeout.
	StallTimeout time.Duration
	// PerClient caps one address's connections (IPv6 by /64); 0: no cap.
	PerClient int
	// Total caps all connections; 0: a quarter of RLIMIT_NOFILE.
	Total int
}

// Listen wraps ln in the options' caps, and returns the HTTP server to
// serve it with h. With tc, the server is to serve TLS (Serve), HTTP/2
// included for clients that offer it.
func Listen(ln net.Listener, h http.Handler, f ConnOptions, tc *tls.Config, logger *slog.Logger) (net.Listener, *http.Server, error) {
	if f.PerClient < 0 || f.Total < 0 || f.IdleTimeout < 0 || f.StallTimeout < 0 {
		return nil, nil, fmt.Errorf("--max-conns-per-client, --max-conns-total, --idle-timeout and --stall-timeout cannot be negative")
	}
	stall := f.StallTimeout
	if stall == 0 {
		stall = DefaultStallTimeout
	}
	limit, err := openFileLimit()
	if err != nil {
		return nil, nil, err
	}
	total := f.Total
	if total == 0 {
		total = max(limit/4, 1)
	} else if total > limit/2 {
		logger.Warn("--max-conns-total leaves the server few descriptors of its own: each connection to a sandbox holds two",
			"max-conns-total", total, "open file limit", limit)
	}
	opts := connlimit.Options{PerClient: f.PerClient, Total: total, Logger: logger}
	if tc == nil {
		// Over TLS the answer could not be read before a handshake: a
		// connection over a cap is only closed.
		opts.OverClient = refusal("too many connections from this address: hutch serve --max-conns-per-client")
		opts.OverTotal = refusal("too many connections: hutch serve --max-conns-total")
	}
	capped := connlimit.New(ln, opts)
	logger.Info("client connections", "per client", f.PerClient, "total", total, "idle timeout", f.IdleTimeout)
	// Requests are capped as connections are (HTTP/2 carries many on
	// one), and none may wait on a client that stopped reading.
	requests := connlimit.NewRequests(f.PerClient, total)
	over := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e2bapi.WriteError(w, http.StatusServiceUnavailable, "too many requests in flight: hutch serve --max-conns-per-client and --max-conns-total cap requests as they cap connections", "")
	})
	srv := &http.Server{
		Handler:           progressDeadlines(requests.Wrap(h, over), stall),
		ReadHeaderTimeout: readHeaderTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		// Zero would fall back to ReadTimeout (none): no idle timeout.
		IdleTimeout: f.IdleTimeout,
		ConnState:   capped.ConnState,
		TLSConfig:   tc,
		// TLS handshakes that fail (clients that do not trust the
		// certificate, scanners) are the clients' to see, not warnings.
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
		// An HTTP/2 connection carries many requests, each routed to a
		// sandbox holding a descriptor of its own: fewer at once than
		// Go's 250. (Clients open another connection past it.)
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: maxStreamsPerConn,
			// A stream's write deadline (the stall timeout) only queues
			// its reset, and one writer serves the whole connection: a
			// client that stops reading its socket stalled that writer
			// in the kernel, the resets never went out and every stream
			// stayed, however long (review 24). A connection that takes
			// no byte for the stall timeout is closed.
			WriteByteTimeout: stall,
		},
	}
	if f.IdleTimeout == 0 {
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
