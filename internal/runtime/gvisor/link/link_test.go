package link

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	"golang.org/x/sys/unix"
)

// socketpair returns the two ends of a unix stream socketpair, as the shim
// and runsc's PID 1 hold them.
func socketpair(t *testing.T) (host, guest *net.UnixConn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int, name string) *net.UnixConn {
		f := os.NewFile(uintptr(fd), name)
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	return conn(fds[0], "host"), conn(fds[1], "guest")
}

// drained waits until c has no unread bytes: the guest has read what a host
// wrote, as a read in progress at a checkpoint has.
func drained(t *testing.T, c *net.UnixConn) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		var n int
		var ierr error
		if err := rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); err != nil || ierr != nil {
			t.Fatal(err, ierr)
		}
		if n == 0 {
			return
		}
	}
	t.Fatal("the guest did not read what was written")
}

// rewired is a guest's standard input through a restore: the descriptor
// stays, the socket behind it changes, and a read in progress goes on with
// the new socket's bytes.
type rewired struct {
	mu  sync.Mutex
	c   net.Conn
	gen int
	rd  time.Time // the read deadline the Guest set
}

func (r *rewired) Read(p []byte) (int, error) {
	for {
		r.mu.Lock()
		c, gen := r.c, r.gen
		r.mu.Unlock()
		n, err := c.Read(p)
		if err != nil && n == 0 {
			r.mu.Lock()
			swapped := r.gen != gen
			r.mu.Unlock()
			if swapped {
				continue
			}
		}
		return n, err
	}
}

func (r *rewired) cur() net.Conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.c
}

// swap rewires r to c.
func (r *rewired) swap(c net.Conn) {
	r.mu.Lock()
	old := r.c
	r.c = c
	r.gen++
	c.SetReadDeadline(r.rd)
	r.mu.Unlock()
	old.SetReadDeadline(time.Now()) // the read in progress moves to c
}

func (r *rewired) Write(p []byte) (int, error) { return r.cur().Write(p) }
func (r *rewired) Close() error                { return r.cur().Close() }
func (r *rewired) LocalAddr() net.Addr         { return r.cur().LocalAddr() }
func (r *rewired) RemoteAddr() net.Addr        { return r.cur().RemoteAddr() }
func (r *rewired) SetDeadline(t time.Time) error {
	return errors.Join(r.SetReadDeadline(t), r.SetWriteDeadline(t))
}
func (r *rewired) SetWriteDeadline(t time.Time) error { return r.cur().SetWriteDeadline(t) }
func (r *rewired) SetReadDeadline(t time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rd = t
	return r.c.SetReadDeadline(t)
}

// envd is what a test serves on a Guest's channels, as envd does.
type envd struct {
	name    string
	next    chan struct{} // /stream writes a chunk per receive
	blocked chan struct{} // /block has been entered
	release chan struct{} // /block returns when closed
}

// serve runs HTTP servers on g's channels 0 and 1 until the test ends.
func serve(t *testing.T, g *Guest, name string) *envd {
	t.Helper()
	e := &envd{name: name, next: make(chan struct{}), blocked: make(chan struct{}, 16), release: make(chan struct{})}
	t.Cleanup(func() { close(e.release) })
	for ch, role := range []string{"control", "api"} {
		mux := http.NewServeMux()
		mux.HandleFunc("/id", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s %s", e.name, role)
		})
		mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
			io.Copy(w, r.Body)
		})
		mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
			for i := range 3 {
				select {
				case <-e.next:
				case <-r.Context().Done():
					return
				}
				fmt.Fprintf(w, "chunk %d\n", i)
				w.(http.Flusher).Flush()
			}
		})
		mux.HandleFunc("/block", func(w http.ResponseWriter, r *http.Request) {
			e.blocked <- struct{}{}
			select {
			case <-e.release:
			case <-r.Context().Done():
			}
		})
		srv := &http.Server{Handler: mux}
		go srv.Serve(g.Listener(byte(ch)))
		t.Cleanup(func() { srv.Close() })
	}
	return e
}

// client returns an HTTP client whose connections are h's streams on ch.
func client(t *testing.T, h *Host, ch byte) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return h.Dial(ctx, ch) },
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// get returns the body of a GET of path.
func get(c *http.Client, path string) (string, error) {
	resp, err := c.Get("http://envd" + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// wantID checks that c reaches envd name's channel role.
func wantID(t *testing.T, c *http.Client, name, role string) {
	t.Helper()
	got, err := get(c, "/id")
	if err != nil {
		t.Fatalf("GET /id: %v", err)
	}
	if want := name + " " + role; got != want {
		t.Fatalf("GET /id = %q, want %q", got, want)
	}
}

// up waits for h's link.
func up(t *testing.T, h *Host) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Wait(ctx); err != nil {
		t.Fatalf("link not up: %v", err)
	}
}

// pair starts a Guest on a rewired socketpair with envd name behind it,
// and a Host on the other end.
func pair(t *testing.T, name string) (*Host, *Guest, *rewired, *envd) {
	t.Helper()
	hr, gr := socketpair(t)
	raw := &rewired{c: gr}
	g := NewGuest(raw, 2, nil)
	t.Cleanup(func() { g.Close() })
	e := serve(t, g, name)
	h := NewHost(hr, nil)
	t.Cleanup(func() { h.Close() })
	up(t, h)
	return h, g, raw, e
}

func TestBasic(t *testing.T) {
	h, _, _, e := pair(t, "g")
	ctl, api := client(t, h, ChannelControl), client(t, h, ChannelAPI)

	t.Run("channels", func(t *testing.T) {
		wantID(t, ctl, "g", "control")
		wantID(t, api, "g", "api")
	})

	t.Run("concurrent", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make(chan error, 400)
		for i := range 40 {
			wg.Go(func() {
				c, want := ctl, "g control"
				if i%2 == 1 {
					c, want = api, "g api"
				}
				for range 10 {
					got, err := get(c, "/id")
					if err == nil && got != want {
						err = fmt.Errorf("got %q, want %q", got, want)
					}
					if err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})

	t.Run("large body, both ways", func(t *testing.T) {
		body := make([]byte, 3<<20) // frames of a full window, and more
		rand.Read(body)
		resp, err := api.Post("http://envd/echo", "application/octet-stream", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, body) {
			t.Errorf("echo: got %d bytes, want the %d sent", len(got), len(body))
		}
	})

	t.Run("streaming", func(t *testing.T) {
		go func() { e.next <- struct{}{} }() // the headers come with the first chunk
		resp, err := api.Get("http://envd/stream")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		for i := range 3 {
			if i > 0 {
				e.next <- struct{}{} // the next chunk only once this one came
			}
			l, err := br.ReadString('\n')
			if want := fmt.Sprintf("chunk %d\n", i); err != nil || l != want {
				t.Fatalf("chunk %d: %q, %v; want %q", i, l, err, want)
			}
		}
	})

	t.Run("Serve", func(t *testing.T) {
		sock := filepath.Join(t.TempDir(), "api.sock")
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go h.Serve(ln, ChannelAPI)
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		for range 5 {
			wantID(t, c, "g", "api")
		}
	})
}

// TestHostRestart shows a guest whose host went away (EOF) taking the next
// host on the same descriptor, its listeners unchanged.
func TestHostRestart(t *testing.T) {
	a, _, raw, _ := pair(t, "g")
	wantID(t, client(t, a, ChannelAPI), "g", "api")

	a.Close() // closes the host's end: the guest reads EOF
	time.Sleep(100 * time.Millisecond)

	hr, gr := socketpair(t)
	raw.swap(gr)
	b := NewHost(hr, nil)
	t.Cleanup(func() { b.Close() })
	up(t, b)
	wantID(t, client(t, b, ChannelControl), "g", "control")
	wantID(t, client(t, b, ChannelAPI), "g", "api")
	if _, err := a.Dial(context.Background(), ChannelAPI); !errors.Is(err, ErrClosed) {
		t.Errorf("closed host's Dial: %v, want ErrClosed", err)
	}
}

// TestRestoreMidSession shows a guest restored with a live session, cut
// anywhere in a frame, taking a new host: the old session dies on the new
// host's bytes and the new one works.
func TestRestoreMidSession(t *testing.T) {
	tests := []struct {
		name    string
		partial []byte // what host A wrote and the guest read, just before the checkpoint
	}{
		{"at a frame boundary", nil},
		{"inside a header", header(1, 0, 1, 0)[:5]},
		{"inside a header, length to come", header(0, 0, 99, 0)[:9]},
		{"inside a header, one length byte to come", header(0, 0, 1, 0)[:11]},
		{"inside a body", cat(header(0, 0, 1, 200000), []byte("partial body"))},
		{"inside a body of a stream never opened", cat(header(0, 0, 77, 100000), make([]byte, 1000))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hr, gr := socketpair(t)
			raw := &rewired{c: gr}
			g := NewGuest(raw, 2, nil)
			t.Cleanup(func() { g.Close() })
			e := serve(t, g, "g")
			a := NewHost(hr, nil)
			t.Cleanup(func() { a.Close() })
			up(t, a)

			// A request in flight (stream 1) at the checkpoint.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			inflight := make(chan error, 1)
			go func() {
				req, _ := http.NewRequestWithContext(ctx, "GET", "http://envd/block", nil)
				resp, err := client(t, a, ChannelAPI).Do(req)
				if err == nil {
					resp.Body.Close()
				}
				inflight <- err
			}()
			<-e.blocked
			if tt.partial != nil {
				if err := a.w.write(tt.partial); err != nil {
					t.Fatal(err)
				}
			}
			drained(t, gr)

			// Restore: the same guest, a new socket, a new host.
			hr2, gr2 := socketpair(t)
			raw.swap(gr2)
			b := NewHost(hr2, nil)
			t.Cleanup(func() { b.Close() })
			up(t, b)
			for range 3 {
				wantID(t, client(t, b, ChannelControl), "g", "control")
				wantID(t, client(t, b, ChannelAPI), "g", "api")
			}
			cancel()
			<-inflight
		})
	}
}

// TestForkedGuests shows guests, each on its own host, working apart, as
// the restores of one image do.
func TestForkedGuests(t *testing.T) {
	h1, _, _, _ := pair(t, "one")
	h2, _, _, _ := pair(t, "two")
	for range 3 {
		wantID(t, client(t, h1, ChannelAPI), "one", "api")
		wantID(t, client(t, h2, ChannelAPI), "two", "api")
	}
}

// TestGarbageBeforeHandshake shows both ends skipping what comes before a
// handshake: random bytes, lines of other nonces, a line longer than the
// bound.
func TestGarbageBeforeHandshake(t *testing.T) {
	random := make([]byte, 4096)
	rand.Read(random)
	lines := func(nonce string) []byte {
		return []byte("HUTCH-LINK " + nonce + "\nHUTCH-LINK-OK " + nonce + "\nHUTCH-LINK-GO " + nonce + "\n" + resetLine)
	}
	tests := []struct {
		name    string
		garbage []byte
	}{
		{"random bytes", random},
		{"stale lines", cat(lines(nonceA), lines(nonceB))},
		{"stale lines without newlines before", cat([]byte("\x00\x01"), lines(nonceA))},
		{"a line longer than the bound", []byte("HUTCH-LINK-OK " + nonceA + strings.Repeat("z", 300) + "\nHUTCH-LINK-GO " + strings.Repeat("0", 300) + "\n")},
		{"the start of a line", []byte("HUTCH-LINK-GO " + nonceA[:7])},
		{"yamux frames", cat(header(1, 1, 1, 0), header(0, 0, 1, 5), []byte("hello"), header(2, 1, 0, 1))},
		{"all of it", cat(random, lines(nonceA), header(0, 0, 1, 5), []byte("HUTCH-LINK-OK "+strings.Repeat("z", 300)))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hr, gr := socketpair(t)
			// Both ways, before either end starts.
			if _, err := hr.Write(tt.garbage); err != nil {
				t.Fatal(err)
			}
			if _, err := gr.Write(tt.garbage); err != nil {
				t.Fatal(err)
			}
			g := NewGuest(gr, 2, nil)
			t.Cleanup(func() { g.Close() })
			serve(t, g, "g")
			h := NewHost(hr, nil)
			t.Cleanup(func() { h.Close() })
			up(t, h)
			wantID(t, client(t, h, ChannelControl), "g", "control")
			wantID(t, client(t, h, ChannelAPI), "g", "api")
		})
	}
}

// TestGuestSessionEnds shows a host learning that the guest's session
// ended (RESET) and shaking hands again, rather than opening streams
// nobody answers.
func TestGuestSessionEnds(t *testing.T) {
	h, _, _, _ := pair(t, "g")
	c := client(t, h, ChannelAPI)
	session := func() *yamux.Session {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.sess
	}
	for range 3 {
		wantID(t, c, "g", "api")
		old := session()
		// Something that is not yamux reaches the guest's session.
		if err := h.w.write([]byte("\xff not yamux\n")); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			if s := session(); s != nil && s != old {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("no new session")
			}
		}
		c.Transport.(*http.Transport).CloseIdleConnections()
		wantID(t, c, "g", "api")
	}
}

// TestNoGuest shows Dial and Wait bounded by their context, and Close
// promptly ending what waits.
func TestNoGuest(t *testing.T) {
	hr, _ := socketpair(t)
	h := NewHost(hr, nil)
	defer h.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := h.Dial(ctx, ChannelAPI); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Dial: %v, want DeadlineExceeded", err)
	}
	if err := h.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait: %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("took %v", d)
	}

	errc := make(chan error, 1)
	go func() {
		_, err := h.Dial(context.Background(), ChannelAPI)
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	h.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("Dial across Close: %v, want ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Error("Dial still waiting after Close")
	}
}

// TestGuestGone shows the host's link ending with its raw connection.
func TestGuestGone(t *testing.T) {
	hr, gr := socketpair(t)
	h := NewHost(hr, nil)
	defer h.Close()
	gr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.Wait(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Wait: %v, want ErrClosed", err)
	}
}

// TestCloseNoLeak shows Close returning promptly, in every state, and
// leaving no goroutine behind.
func TestCloseNoLeak(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T) (closers []func() error)
	}{
		{"live, after requests, with a stream open", func(t *testing.T) []func() error {
			hr, gr := socketpair(t)
			g := NewGuest(gr, 2, nil)
			e := serve(t, g, "g")
			h := NewHost(hr, nil)
			up(t, h)
			c := client(t, h, ChannelAPI)
			wantID(t, c, "g", "api")
			go get(c, "/block") // left in flight
			<-e.blocked
			return []func() error{h.Close, g.Close}
		}},
		{"guest first", func(t *testing.T) []func() error {
			hr, gr := socketpair(t)
			g := NewGuest(gr, 2, nil)
			serve(t, g, "g")
			h := NewHost(hr, nil)
			up(t, h)
			wantID(t, client(t, h, ChannelAPI), "g", "api")
			return []func() error{g.Close, h.Close}
		}},
		{"guest waiting for a host", func(t *testing.T) []func() error {
			_, gr := socketpair(t)
			return []func() error{NewGuest(gr, 2, nil).Close}
		}},
		{"guest after EOF", func(t *testing.T) []func() error {
			hr, gr := socketpair(t)
			g := NewGuest(gr, 2, nil)
			hr.Close()
			time.Sleep(50 * time.Millisecond)
			return []func() error{g.Close}
		}},
		{"host shaking hands", func(t *testing.T) []func() error {
			hr, _ := socketpair(t)
			h := NewHost(hr, nil)
			time.Sleep(50 * time.Millisecond)
			return []func() error{h.Close}
		}},
		{"host serving a listener", func(t *testing.T) []func() error {
			hr, gr := socketpair(t)
			g := NewGuest(gr, 2, nil)
			serve(t, g, "g")
			h := NewHost(hr, nil)
			ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
			if err != nil {
				t.Fatal(err)
			}
			go h.Serve(ln, ChannelControl)
			c, err := net.Dial("unix", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			fmt.Fprintf(c, "GET /id HTTP/1.1\r\nHost: envd\r\n\r\n")
			if _, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
				t.Fatal(err)
			}
			// c stays open: Close must not wait for it.
			return []func() error{h.Close, g.Close}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := runtime.NumGoroutine()
			t.Run("run", func(t *testing.T) {
				closers := tt.run(t)
				start := time.Now()
				for _, c := range closers {
					if err := c(); err != nil {
						t.Errorf("Close: %v", err)
					}
				}
				if d := time.Since(start); d > time.Second {
					t.Errorf("Close took %v", d)
				}
			})
			var n int
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				if n = runtime.NumGoroutine(); n <= base {
					return
				}
			}
			buf := make([]byte, 1<<20)
			t.Errorf("%d goroutines, %d before:\n%s", n, base, buf[:runtime.Stack(buf, true)])
		})
	}
}

// TestGuestOpensNothing: a guest that sends what opens something on the
// host — pings, streams — by the thousand, never reading an answer, makes
// the host hold nothing for them (review 21: each ping was a goroutine
// waiting to answer, and a shim grew by hundreds of MiB).
func TestGuestOpensNothing(t *testing.T) {
	hostEnd, guestEnd := socketpair(t)
	h := NewHost(hostEnd, nil)
	defer h.Close()
	// The handshake, by hand: the guest is hostile.
	r := bufio.NewReader(guestEnd)
	var nonce string
	for nonce == "" {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if i := strings.Index(l, helloPrefix); i >= 0 {
			nonce = strings.TrimSpace(l[i+len(helloPrefix):])
		}
	}
	guestEnd.Write(line(okPrefix, nonce))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	var frame [12]byte
	for i := 0; i < 20000; i++ {
		frame = [12]byte{0, 2, 0, 1} // ping, SYN
		binary.BigEndian.PutUint32(frame[8:], uint32(i))
		if _, err := guestEnd.Write(frame[:]); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	if grew := runtime.NumGoroutine() - before; grew > 50 {
		t.Errorf("20000 pings from the guest left %d more goroutines on the host", grew)
	}
	// A stream the guest opens is never accepted, and holds nothing.
	before = runtime.NumGoroutine()
	for i := 0; i < 2000; i++ {
		frame = [12]byte{0, 1, 0, 1} // window update, SYN: a new stream
		binary.BigEndian.PutUint32(frame[4:], uint32(2*i+2))
		if _, err := guestEnd.Write(frame[:]); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	if grew := runtime.NumGoroutine() - before; grew > 50 {
		t.Errorf("2000 streams opened by the guest left %d more goroutines on the host", grew)
	}
}
