package serve

import (
	"bufio"
	"net"
	"net/http"
	"time"
)

// DefaultStallTimeout is how long one write of an answer may wait for the
// client to take it (hutch serve --stall-timeout). A client that stops reading (an HTTP/2 client that grants no
// flow-control window, a socket never read) otherwise held the request,
// its goroutine, its buffers and, for a request routed to a sandbox, the
// descriptor of its way there, for as long as it liked: idle timeouts do
// not apply to a request in progress (review 23). An answer's writes come
// at any pace: only each one's wait is bounded.
const DefaultStallTimeout = 60 * time.Second

// progressDeadlines serves h with each write of an answer bounded by
// stall: an HTTP/2 stream whose write misses it is reset (its
// connection carries on), an HTTP/1 connection closed.
//
// The deadline is set around each write and cleared after it, never left
// while the handler works: HTTP/2's is a timer that resets the stream when
// it fires, write or no write, and a command's stream may say nothing for
// hours. After the handler it is set once more, for what net/http writes
// itself (a header the handler left unwritten, the rest of a buffered
// answer); an HTTP/1 connection's next request starts by clearing it.
func progressDeadlines(h http.Handler, stall time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := &progressWriter{ResponseWriter: w, rc: http.NewResponseController(w), stall: stall}
		p.disarm()
		h.ServeHTTP(p, r)
		if !p.hijacked {
			p.arm()
		}
	})
}

// progressWriter arms the write deadline before every write.
type progressWriter struct {
	http.ResponseWriter
	rc       *http.ResponseController
	stall    time.Duration
	hijacked bool
}

func (p *progressWriter) arm()    { p.rc.SetWriteDeadline(time.Now().Add(p.stall)) }
func (p *progressWriter) disarm() { p.rc.SetWriteDeadline(time.Time{}) }

// WriteHeader writes the header, within the deadline.
func (p *progressWriter) WriteHeader(code int) {
	p.arm()
	defer p.disarm()
	p.ResponseWriter.WriteHeader(code)
}

// Write writes part of the answer, within the deadline.
func (p *progressWriter) Write(b []byte) (int, error) {
	p.arm()
	defer p.disarm()
	return p.ResponseWriter.Write(b)
}

// FlushError sends what was written so far, within the deadline.
func (p *progressWriter) FlushError() error {
	p.arm()
	defer p.disarm()
	return p.rc.Flush()
}

// Flush is FlushError for http.Flusher.
func (p *progressWriter) Flush() { p.FlushError() }

// Hijack hands the connection over (an Upgrade tunnel) with no deadline:
// a tunnel's pace is its own, and it holds a connection of its own, which
// the connection caps count.
func (p *progressWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	p.disarm()
	c, rw, err := p.rc.Hijack()
	if err == nil {
		p.hijacked = true
	}
	return c, rw, err
}

// Unwrap lets http.ResponseController reach the connection's response.
func (p *progressWriter) Unwrap() http.ResponseWriter { return p.ResponseWriter }
