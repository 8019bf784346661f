package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The bench server speaks just enough HTTP/1.1 for the egress proxy to
// read a Host and splice, and every path gets the very same bytes, so
// that the paths differ only in what carries them. A request is one
// request line and headers; what follows depends on its path:
//
//	GET /ping    a small response ("pong"), then the server closes: one
//	             connect + request + response round trip.
//	GET /echo    a response head, then every msgSize bytes the client
//	             sends come back: round trips on an open connection.
//	GET /source  a response head, then data until the client goes away:
//	             the client's download.
//	POST /sink   the server reads until the client's half-close, then
//	             answers with the number of bytes it read: the upload.

// msgSize is the size of one request and one response on an open
// connection: a small RPC.
const msgSize = 64

// bulkBuf is the read and write size of bulk transfers on both sides.
const bulkBuf = 256 << 10

var (
	pingResponse = []byte("HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\npong")
	streamHead   = []byte("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
)

// request is what a client sends to open a connection: the allowed Host,
// so the egress proxy splices it.
func request(method, path string) []byte {
	return []byte(method + " " + path + " HTTP/1.1\r\nHost: " + benchName + "\r\nUser-Agent: hutch-bench\r\n\r\n")
}

// serve accepts until ln is closed.
func serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go handle(c)
	}
}

// bulkBufs holds the bulk transfers' buffers: a buffer per connection
// would make the harness, proxy included, collect garbage all the time.
var bulkBufs = sync.Pool{New: func() any { return make([]byte, bulkBuf) }}

// handle serves one connection.
func handle(c net.Conn) {
	defer c.Close()
	// Small: most connections carry one small request. A bulk read
	// bypasses it (bufio reads straight into a buffer as large as its).
	r := bufio.NewReaderSize(c, 4<<10)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := r.ReadString('\n')
	if err != nil {
		return
	}
	for { // the headers: nothing in them matters here
		h, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if h == "\r\n" || h == "\n" {
			break
		}
	}
	c.SetReadDeadline(time.Time{})
	f := strings.Fields(line)
	if len(f) < 2 {
		return
	}
	switch f[1] {
	case "/ping":
		c.Write(pingResponse)
	case "/echo":
		if _, err := c.Write(streamHead); err != nil {
			return
		}
		buf := make([]byte, msgSize)
		for {
			if _, err := io.ReadFull(r, buf); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	case "/source":
		if _, err := c.Write(streamHead); err != nil {
			return
		}
		buf := bulkBufs.Get().([]byte)
		defer bulkBufs.Put(buf)
		for {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	case "/sink":
		// A plain read loop: io.Copy to io.Discard would read 8 KiB at a
		// time (Discard's own buffer), whatever buffer it is given.
		buf := bulkBufs.Get().([]byte)
		defer bulkBufs.Put(buf)
		var n int64
		for {
			k, err := r.Read(buf)
			n += int64(k)
			if err == io.EOF {
				break
			}
			if err != nil {
				return
			}
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n%d\n", n)
	}
}

// dial connects to addr (from the calling thread's namespace).
func dial(addr string) (*net.TCPConn, error) {
	c, err := net.DialTimeout("tcp4", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// ping is one connect + small request + small response; the connection
// is closed after.
func ping(addr string, buf []byte) error {
	c, err := dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write(request("GET", "/ping")); err != nil {
		return err
	}
	if _, err := io.ReadFull(c, buf[:len(pingResponse)]); err != nil {
		return err
	}
	if !bytes.Equal(buf[:len(pingResponse)], pingResponse) {
		return fmt.Errorf("unexpected answer %q", buf[:len(pingResponse)])
	}
	return nil
}

// openEcho opens a connection for round trips.
func openEcho(addr string) (*net.TCPConn, error) {
	c, err := dial(addr)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write(request("GET", "/echo")); err != nil {
		c.Close()
		return nil, err
	}
	head := make([]byte, len(streamHead))
	if _, err := io.ReadFull(c, head); err != nil {
		c.Close()
		return nil, err
	}
	if !bytes.Equal(head, streamHead) {
		c.Close()
		return nil, fmt.Errorf("unexpected answer %q", head)
	}
	return c, nil
}

// roundTrip sends one message and reads its echo.
func roundTrip(c net.Conn, msg, buf []byte) error {
	if _, err := c.Write(msg); err != nil {
		return err
	}
	_, err := io.ReadFull(c, buf[:len(msg)])
	return err
}

// download reads from /source for d; it returns the bytes read and the
// time they took, from the request to the last read.
func download(addr string, d time.Duration) (int64, time.Duration, error) {
	c, err := dial(addr)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	start := time.Now()
	if _, err := c.Write(request("GET", "/source")); err != nil {
		return 0, 0, err
	}
	head := make([]byte, len(streamHead))
	if _, err := io.ReadFull(c, head); err != nil {
		return 0, 0, err
	}
	buf := bulkBufs.Get().([]byte)
	defer bulkBufs.Put(buf)
	var n int64
	end := start.Add(d)
	for {
		k, err := c.Read(buf)
		n += int64(k)
		if err != nil {
			return n, time.Since(start), err
		}
		if now := time.Now(); !now.Before(end) {
			return n, now.Sub(start), nil
		}
	}
}

// upload writes to /sink for d, half-closes and waits for the server's
// count: the bytes the server read and the time from the request to its
// answer (so nothing still in buffers is counted as sent).
func upload(addr string, d time.Duration) (int64, time.Duration, error) {
	c, err := dial(addr)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	start := time.Now()
	if _, err := c.Write(request("POST", "/sink")); err != nil {
		return 0, 0, err
	}
	buf := bulkBufs.Get().([]byte)
	defer bulkBufs.Put(buf)
	end := start.Add(d)
	for time.Now().Before(end) {
		if _, err := c.Write(buf); err != nil {
			return 0, 0, err
		}
	}
	if err := c.CloseWrite(); err != nil {
		return 0, 0, err
	}
	answer, err := io.ReadAll(c)
	elapsed := time.Since(start)
	if err != nil {
		return 0, 0, err
	}
	_, count, ok := bytes.Cut(answer, []byte("\r\n\r\n"))
	if !ok {
		return 0, 0, fmt.Errorf("unexpected answer %q", answer)
	}
	n, err := strconv.ParseInt(string(bytes.TrimSpace(count)), 10, 64)
	if err != nil {
		return 0, 0, errors.New("unexpected count " + strconv.Quote(string(count)))
	}
	return n, elapsed, nil
}
