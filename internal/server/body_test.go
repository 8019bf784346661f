package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// rawConn is a client connection that writes requests by hand.
type rawConn struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func dialRaw(t *testing.T, srv *httptest.Server) *rawConn {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rawConn{t: t, conn: conn, r: bufio.NewReader(conn)}
}

func (c *rawConn) send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.conn, s); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// response reads one answer, waiting at most d.
func (c *rawConn) response(d time.Duration) *http.Response {
	c.t.Helper()
	c.conn.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		c.t.Fatalf("no answer within %v: %v", d, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body = io.NopCloser(strings.NewReader(string(body)))
	return resp
}

// closedWithin reports whether the server closes the connection within
// d, while the client trickles a byte every tick as an attacker would.
func (c *rawConn) closedWithin(d, tick time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		c.conn.SetReadDeadline(time.Now().Add(tick))
		if _, err := c.r.ReadByte(); err != nil {
			if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
				return true // EOF or reset: closed
			}
		}
		if _, err := c.conn.Write([]byte(" ")); err != nil {
			return true
		}
	}
	return false
}

func bodyOf(resp *http.Response) string { b, _ := io.ReadAll(resp.Body); return string(b) }

// TestSlowBodies: a request body must keep a minimum pace, and a
// connection whose body the handler left unread is closed after the
// answer instead of being drained at the client's pace (review S1:
// unauthenticated POSTs trickling a declared body held their connections
// busy for as long as they liked, locking every other client out).
func TestSlowBodies(t *testing.T) {
	srv, key := newTestServerWith(t, Options{BodyGrace: 500 * time.Millisecond, BodyMinRate: 1000})
	const trickle = 100 * time.Millisecond
	slowHeaders := func(method, path, extra string, length int) string {
		return fmt.Sprintf("%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n{", method, path, length, extra)
	}
	tests := []struct {
		name       string
		request    string
		wantStatus int
		wantBody   string
	}{
		{"unauthenticated create", slowHeaders("POST", "/sandboxes", "", 200000), 401, `"code":401`},
		{"unauthenticated create, small body", slowHeaders("POST", "/v2/sandboxes", "", 2000), 401, `"code":401`},
		{"unknown endpoint", slowHeaders("POST", "/nope", "X-API-KEY: "+key+"\r\n", 200000), 404, `"code":404`},
		{"a sandbox that does not exist", slowHeaders("POST", "/process.Process/Start", "E2b-Sandbox-Id: inope\r\n", 200000), 502, `"sandboxId":"inope"`},
		{"a port out of range", slowHeaders("POST", "/", "E2b-Sandbox-Id: inope\r\nE2b-Sandbox-Port: 0\r\n", 200000), 400, `"code":400`},
		{"a signed URL of no sandbox", slowHeaders("POST", "/files?path=x&signature=v1_AAAA", "", 200000), 401, `"code":401`},
		{"declared too large", slowHeaders("POST", "/sandboxes", "X-API-KEY: "+key+"\r\n", 2<<20), 413, `"code":413`},
		{"a keyed create below the pace", slowHeaders("POST", "/sandboxes", "X-API-KEY: "+key+"\r\n", 2000), 408, `"code":408`},
		{"a keyed timeout below the pace", slowHeaders("POST", "/sandboxes/inope/timeout", "X-API-KEY: "+key+"\r\n", 2000), 408, `"code":408`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, srv)
			c.send(tc.request)
			// Trickle a byte per tick until the answer comes.
			answered := make(chan *http.Response, 1)
			go func() {
				c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
				resp, err := http.ReadResponse(c.r, nil)
				if err != nil {
					close(answered)
					return
				}
				resp.Body.Close()
				answered <- resp
			}()
			var resp *http.Response
		wait:
			for start := time.Now(); time.Since(start) < 5*time.Second; {
				select {
				case resp = <-answered:
					break wait
				case <-time.After(trickle):
					c.conn.Write([]byte(" "))
				}
			}
			if resp == nil {
				t.Fatalf("no answer while the body trickled")
			}
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.wantStatus)
			}
			if !resp.Close {
				t.Errorf("the answer does not say Connection: close, though the body was not read")
			}
			if !c.closedWithin(drainWindow+2*time.Second, trickle) {
				t.Errorf("the connection stayed open while its body trickled on, after the answer")
			}
		})
	}
}

// TestPacedBodies: bodies that keep the pace are served, however long
// they take, and a connection whose body was read whole stays open for
// the next request.
func TestPacedBodies(t *testing.T) {
	srv, key := newTestServerWith(t, Options{BodyGrace: 300 * time.Millisecond, BodyMinRate: 1000})
	c := dialRaw(t, srv)
	// 2400 bytes at 2000 bytes per second: 1.2 s, four times the grace.
	body := `{"timeout":30` + strings.Repeat(" ", 2400-15) + `}`
	c.send(fmt.Sprintf("POST /sandboxes/inope/timeout HTTP/1.1\r\nHost: x\r\nX-API-KEY: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", key, len(body)))
	for i := 0; i < len(body); i += 100 {
		c.send(body[i:min(i+100, len(body))])
		time.Sleep(50 * time.Millisecond)
	}
	resp := c.response(5 * time.Second)
	if resp.StatusCode != 404 || !strings.Contains(bodyOf(resp), `"code":404`) {
		t.Fatalf("a paced body: %d, want the handler's own 404", resp.StatusCode)
	}
	if resp.Close {
		t.Errorf("the connection closes after a body read whole")
	}
	// The same connection serves another request.
	c.send("GET /v2/sandboxes HTTP/1.1\r\nHost: x\r\nX-API-KEY: " + key + "\r\n\r\n")
	if resp := c.response(5 * time.Second); resp.StatusCode != 200 {
		t.Errorf("the next request on the connection: %d, want 200", resp.StatusCode)
	}

	// A chunked body at a pace, then an unread one answered early.
	c = dialRaw(t, srv)
	c.send("POST /sandboxes/inope/timeout HTTP/1.1\r\nHost: x\r\nX-API-KEY: " + key + "\r\nTransfer-Encoding: chunked\r\n\r\n")
	chunk := `{"timeout":30}` + strings.Repeat(" ", 186)
	for i := 0; i < len(chunk); i += 20 {
		part := chunk[i:min(i+20, len(chunk))]
		c.send(fmt.Sprintf("%x\r\n%s\r\n", len(part), part))
		time.Sleep(30 * time.Millisecond)
	}
	c.send("0\r\n\r\n")
	if resp := c.response(5 * time.Second); resp.StatusCode != 404 || resp.Close {
		t.Errorf("a chunked paced body: %d (close %v), want 404 on a kept connection", resp.StatusCode, resp.Close)
	}
}
