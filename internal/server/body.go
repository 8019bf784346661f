package server

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hutch-sandbox/hutch/internal/e2bapi"
)

// Request bodies arrive at the client's pace, and net/http sets no limit
// on it (the listener's ReadTimeout would cut streams that last). Worse,
// when a handler answers without reading the body (a 401, a 404, a
// router's 403 or 502), net/http reads up to 256 KiB of what is left,
// at the client's pace, to keep the connection for another request: a
// client trickling a declared body kept its connection busy, so counted
// against --max-conns-total and never closed as idle, for as long as it
// liked (review S1: 5100 unauthenticated POSTs at 1 byte per 5 s shut
// every other client out with 503s).
//
// So every body is read under two rules:
//
//   - Pace: the time the server spends waiting for a body's bytes may
//     exceed what the bytes earn (one second per minRate bytes) by at
//     most grace. A trickle runs out after about grace; an upload at any
//     reasonable speed never does, however long it lasts, and time the
//     server spends not reading (a sandbox slow to take an upload) is not
//     the client's. A body too slow fails its reader with a 408.
//   - No drain: an answer written before the body has all come says
//     "Connection: close", and once the handler returns what is left may
//     take at most drainWindow to arrive (a client that sent its body
//     reads its answer, not a reset); then the connection is closed.
//     HTTP/2 needs neither: the rest of one request's body is refused by
//     resetting its stream alone, and the connection carries on (there,
//     "Connection: close" would end it for every request it carries: Go
//     answers it with GOAWAY, and undici, the JS SDK's client, fails the
//     requests in flight on a GOAWAY).
//
// WebSocket and other Upgrade tunnels are not bodies and are not paced.
const (
	// defaultBodyGrace is how much longer than its bytes earn a body may
	// keep the server waiting: twice the request headers' allowance
	// (serve's readHeaderTimeout), for clients that compute a body as
	// they send it.
	defaultBodyGrace = 20 * time.Second
	// defaultBodyMinRate is the pace, in bytes per second, that earns a
	// body its waiting time: far below any link an upload would use (a
	// 2G mobile link carries some 30 KB/s). Apache's mod_reqtimeout uses
	// the same rate by default.
	defaultBodyMinRate = 500
	// drainWindow is how long a body the handler left unread may take to
	// come in after the answer, before the connection is closed.
	drainWindow = time.Second
	// maxDrain is the most of a body left unread that is read after the
	// answer (see paceBodies).
	maxDrain = 8 << 20
)

// errBodyTooSlow is what reading a body returns once the body has fallen
// below the pace; the E2B adapter answers it as it is.
var errBodyTooSlow = &e2bapi.StatusError{Status: http.StatusRequestTimeout,
	Message: "the request body came too slowly"}

// pacedBody is a request body read under the pace rule. Safe for one
// reader at a time, and for Close and Done concurrently with it.
type pacedBody struct {
	body    io.ReadCloser
	rc      *http.ResponseController
	grace   time.Duration
	minRate int64

	mu       sync.Mutex // serializes deadline changes with Close
	closed   bool
	received int64
	waited   time.Duration
	deadline time.Time // of the read in progress, if any

	done atomic.Bool // the body has come to its end
	slow atomic.Bool // the body fell below the pace
}

// Read reads the body with a read deadline on the connection: the
// waiting time the body has left.
func (b *pacedBody) Read(p []byte) (int, error) {
	if b.done.Load() {
		// The connection's deadline is net/http's again (it watches for
		// the client going away from here on).
		return b.body.Read(p)
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return 0, http.ErrBodyReadAfterClose
	}
	left := b.grace + time.Duration(b.received)*time.Second/time.Duration(b.minRate) - b.waited
	start := time.Now()
	b.deadline = start.Add(max(left, 0))
	b.rc.SetReadDeadline(b.deadline)
	b.mu.Unlock()

	n, err := b.body.Read(p)
	b.mu.Lock()
	b.waited += time.Since(start)
	b.received += int64(n)
	b.deadline = time.Time{}
	b.mu.Unlock()
	switch {
	case err == io.EOF:
		b.done.Store(true)
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.slow.Store(true)
		err = errBodyTooSlow
	}
	return n, err
}

// Close ends reading. A body that has not all come is left for net/http
// to read and close after the answer has gone out (it does so to keep the
// connection, but the answer says it closes), with drainWindow from now
// for what is left to arrive; a read in progress ends by then too.
func (b *pacedBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	if b.done.Load() {
		return b.body.Close()
	}
	b.rc.SetReadDeadline(time.Now().Add(drainWindow))
	return nil
}

// guarded is a response whose request body may not have all come: an
// answer written before it has says "Connection: close".
type guarded struct {
	http.ResponseWriter
	body     *pacedBody
	http1    bool // the connection is HTTP/1: "Connection: close" applies
	wrote    bool
	hijacked bool
}

// WriteHeader adds "Connection: close" to a final answer written before
// the whole body came.
func (g *guarded) WriteHeader(code int) {
	if code >= 200 && !g.wrote {
		g.wrote = true
		if g.http1 && !g.body.done.Load() {
			g.Header().Set("Connection", "close")
		}
	}
	g.ResponseWriter.WriteHeader(code)
}

// Write writes the body of the answer, its header first if need be.
func (g *guarded) Write(p []byte) (int, error) {
	if !g.wrote {
		g.WriteHeader(http.StatusOK)
	}
	return g.ResponseWriter.Write(p)
}

// FlushError sends what was written so far, the header first if need be.
func (g *guarded) FlushError() error {
	if !g.wrote {
		g.WriteHeader(http.StatusOK)
	}
	return http.NewResponseController(g.ResponseWriter).Flush()
}

// Flush is FlushError for http.Flusher.
func (g *guarded) Flush() { g.FlushError() }

// Hijack hands the connection over (an Upgrade tunnel); the body rules
// end there.
func (g *guarded) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	g.hijacked = true
	return http.NewResponseController(g.ResponseWriter).Hijack()
}

// Unwrap lets http.ResponseController reach the connection's response
// (flushes, deadlines, full duplex).
func (g *guarded) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// paceBodies serves r with h under the body rules above.
func (s *Server) paceBodies(w http.ResponseWriter, r *http.Request, h func(http.ResponseWriter, *http.Request)) {
	if r.Body == nil || r.Body == http.NoBody {
		h(w, r)
		return
	}
	body := &pacedBody{body: r.Body, rc: http.NewResponseController(w), grace: s.bodyGrace, minRate: s.bodyMinRate}
	r.Body = body
	g := &guarded{ResponseWriter: w, body: body, http1: r.ProtoMajor == 1}
	h(g, r)
	if g.hijacked || body.done.Load() {
		return
	}
	if !g.http1 {
		// HTTP/2 resets the stream of the unread rest.
		body.Close()
		return
	}
	if !g.wrote {
		// net/http would answer 200 itself: say Connection: close.
		g.WriteHeader(http.StatusOK)
	}
	// What is left may take drainWindow to come, and is read and dropped
	// once the answer has gone out: net/http itself reads at most 256 KiB
	// of it and then closes with the rest unread, which resets the
	// connection, and a client still sending (a create of 2 MiB answered
	// 413 at once) got "connection reset" instead of its answer. Past
	// maxDrain the rest is left, and the connection closed, as the answer
	// said.
	body.mu.Lock()
	closed := body.closed
	body.mu.Unlock()
	if !closed && !body.slow.Load() && body.rc.EnableFullDuplex() == nil && body.rc.Flush() == nil {
		body.rc.SetReadDeadline(time.Now().Add(drainWindow))
		io.Copy(io.Discard, io.LimitReader(body.body, maxDrain))
	}
	body.Close()
}

// tooSlow reports whether r's body was cut for coming too slowly, or is
// being cut now: net/http cancels the request's context when the read
// fails, which a reverse proxy may see before the read returns.
func tooSlow(r *http.Request) bool {
	b, ok := r.Body.(*pacedBody)
	if !ok {
		return false
	}
	if b.slow.Load() {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.deadline.IsZero() && !time.Now().Before(b.deadline)
}
