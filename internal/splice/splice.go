// Package splice joins two connections the way a proxy or a tunnel does:
// what one sends is copied to the other, each way, until both ways end.
//
// An end of one way (EOF) is passed on as a half-close (CloseWrite), since
// protocols such as HTTP/1.0 and netcat-style clients use it to say
// "that was all", and the other way may still carry the answer. But a peer
// that never closes its way must not hold both connections forever: once
// one way has ended, the other ends when it has been idle for the linger
// time (review 3: a service that neither read nor closed kept every
// half-closed tunnel, and its descriptors, open for good).
package splice

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultLinger is how long the way left open after the other ended may
// stay idle: ample for a server to finish an answer, short next to a
// descriptor held for ever.
const DefaultLinger = 30 * time.Second

// Join copies a to b and b to a until both ways end, then closes both. ar,
// when not nil, is read in place of a (for bytes a buffered reader already
// took from it); the same for br and b. A way ends at EOF, which is passed
// on with CloseWrite, at an error, which closes both connections, or,
// once the other way has ended, after linger without a byte (zero means
// DefaultLinger).
func Join(a net.Conn, ar io.Reader, b net.Conn, br io.Reader, linger time.Duration) {
	if linger <= 0 {
		linger = DefaultLinger
	}
	if ar == nil {
		ar = a
	}
	if br == nil {
		br = b
	}
	var ended atomic.Int32 // ways that have ended
	var wg sync.WaitGroup
	half := func(dst net.Conn, src io.Reader, srcConn, other net.Conn) {
		defer wg.Done()
		if err := copyLingering(dst, src, srcConn, &ended, linger); err != nil {
			a.Close()
			b.Close()
			return
		}
		CloseWrite(dst)
		if ended.Add(1) == 1 {
			// The other way now has linger to show it is still alive.
			other.SetReadDeadline(time.Now().Add(linger))
		}
	}
	wg.Add(2)
	go half(b, ar, a, b)
	go half(a, br, b, a)
	wg.Wait()
	a.Close()
	b.Close()
}

// copyLingering copies src to dst until EOF (nil) or an error. A read
// deadline that passes after the other way ended is an error only if
// nothing came since the last one; otherwise the deadline moves on.
func copyLingering(dst net.Conn, src io.Reader, srcConn net.Conn, ended *atomic.Int32, linger time.Duration) error {
	for {
		n, err := io.Copy(dst, src)
		if err == nil || errors.Is(err, io.EOF) {
			return nil
		}
		if n > 0 && ended.Load() > 0 && errors.Is(err, os.ErrDeadlineExceeded) {
			srcConn.SetReadDeadline(time.Now().Add(linger))
			continue
		}
		return err
	}
}

// CloseWrite half-closes c when it can (TCP and unix sockets can), and
// closes it otherwise, so that the peer learns the end either way.
func CloseWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}
