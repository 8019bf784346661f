package sdk_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/sdk"
)

// TestSlowBodyFlood: clients that declare a request body and trickle it
// cannot lock others out of `hutch serve` (review S1: 5100 unauthenticated
// POST /sandboxes with Content-Length 200000 at one byte per 5 s held
// their connections busy after the 401 — net/http drained the body at the
// client's pace — so --max-conns-total filled and every other client got
// 503 for the whole attack). The answer now closes the connection within
// a second, and a keyed client from a fresh address is served during the
// flood.
func TestSlowBodyFlood(t *testing.T) {
	const (
		total    = 60
		flood    = 90
		trickle  = time.Second
		closeMax = 3 * time.Second // the server's 1 s drain window and slack
	)
	e := startServer(t, "--max-conns-total", fmt.Sprint(total))

	type attacker struct {
		c        *heldConn
		answered time.Time
		status   int
	}
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	var (
		attackers []*attacker
		mu        sync.Mutex
		closed    = map[*attacker]time.Time{}
		wg        sync.WaitGroup
	)
	for i := range flood {
		c := dialFrom(t, fmt.Sprintf("127.0.0.%d", 2+i%3), e.srv.Addr)
		a := &attacker{c: c}
		attackers = append(attackers, a)
		io.WriteString(c, "POST /sandboxes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 200000\r\n\r\n{")
		wg.Go(func() {
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(c.r, nil)
			c.SetReadDeadline(time.Time{})
			mu.Lock()
			if err == nil {
				a.status, a.answered = resp.StatusCode, time.Now()
			}
			mu.Unlock()
			if err == nil {
				io.Copy(io.Discard, resp.Body)
			}
			// It goes on trickling, a byte a second, until its
			// connection is closed; when it was is noted.
			for ctx.Err() == nil {
				if c.closed(trickle) {
					break
				}
				if _, err := c.Write([]byte(" ")); err != nil {
					break
				}
			}
			if ctx.Err() == nil {
				mu.Lock()
				closed[a] = time.Now()
				mu.Unlock()
			}
		})
	}

	// A keyed client from an address of its own is served during the
	// flood: a sandbox and a command in it.
	cfg := e.cfg
	cfg.HTTPClient = fromAddr("127.0.0.9")
	start := time.Now()
	var (
		sbx *sdk.Sandbox
		err error
	)
	for sbx == nil && time.Since(start) < 10*time.Second {
		if sbx, err = sdk.Create(t.Context(), sdk.CreateOptions{Config: cfg}); err != nil {
			time.Sleep(200 * time.Millisecond)
		}
	}
	if sbx == nil {
		t.Fatalf("a keyed client was not served during the flood (10 s of tries): %v", err)
	}
	killAtEnd(t, sbx)
	t.Logf("a keyed create was served %v into the flood", time.Since(start).Round(time.Millisecond))
	if out := run(t, sbx, "echo served", nil).Stdout; out != "served\n" {
		t.Errorf("a command during the flood: %q", out)
	}

	time.Sleep(closeMax)
	stop()
	wg.Wait()
	unauthorized, refused := 0, 0
	var slowest time.Duration
	for _, a := range attackers {
		switch a.status {
		case 0:
			// Refused at the cap with a reset rather than the 503 (it
			// had sent its request already), or never answered.
			if _, ok := closed[a]; !ok {
				t.Errorf("an attacker had no answer within 5 s and is still connected")
			}
			refused++
		case http.StatusUnauthorized:
			unauthorized++
			at, ok := closed[a]
			if !ok {
				t.Errorf("an attacker's connection is still open %v after its 401", time.Since(a.answered).Round(time.Millisecond))
				continue
			}
			slowest = max(slowest, at.Sub(a.answered))
		case http.StatusServiceUnavailable:
			refused++
		default:
			t.Errorf("an attacker got %d", a.status)
		}
	}
	t.Logf("%d attackers answered 401, %d refused at the cap; the slowest closed %v after its 401", unauthorized, refused, slowest.Round(time.Millisecond))
	if slowest > closeMax {
		t.Errorf("an attacker's connection closed %v after its 401, want within %v", slowest, closeMax)
	}
}

// slowReader yields chunk every tick, n times.
type slowReader struct {
	chunk []byte
	tick  time.Duration
	n     int
}

func (r *slowReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	time.Sleep(r.tick)
	r.n--
	return copy(p, r.chunk), nil
}

// TestSlowUploads: an upload through the router that keeps a reasonable
// pace (4 KiB/s here) works however long it lasts — 25 s, past the 20 s
// the server lets a body keep it waiting beyond its pace — while one that
// trickles a byte a second is cut with a 408 (review S1).
func TestSlowUploads(t *testing.T) {
	e := startServer(t)
	sbx := e.sandbox(t, sdk.CreateOptions{})
	var wg sync.WaitGroup
	wg.Go(func() {
		chunk := bytes.Repeat([]byte("p"), 1024)
		start := time.Now()
		_, err := sbx.Files.WriteStream(t.Context(), "/tmp/paced.bin", &slowReader{chunk: chunk, tick: 250 * time.Millisecond, n: 100}, nil)
		if err != nil {
			t.Errorf("a paced upload (4 KiB/s for 25 s): %v", err)
			return
		}
		t.Logf("a paced upload of 100 KiB took %v", time.Since(start).Round(time.Millisecond))
		got, err := sbx.Files.Read(t.Context(), "/tmp/paced.bin", nil)
		must(t, err, "Read")
		if !bytes.Equal(got, bytes.Repeat(chunk, 100)) {
			t.Errorf("the paced upload arrived as %d bytes, want 102400", len(got))
		}
	})
	wg.Go(func() {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, e.srv.URL()+"/files?path=/tmp/trickled.bin&username=user",
			&slowReader{chunk: []byte("t"), tick: time.Second, n: 100})
		req.ContentLength = 100
		req.Header.Set("E2b-Sandbox-Id", sbx.ID)
		req.Header.Set("X-Access-Token", sbx.EnvdAccessToken)
		req.Header.Set("Content-Type", "application/octet-stream")
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("a trickled upload: %v, want a 408", err)
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Logf("a trickled upload was answered %d after %v", resp.StatusCode, time.Since(start).Round(time.Millisecond))
		if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), `"code":408`) {
			t.Errorf("a trickled upload: %d %s, want 408", resp.StatusCode, b)
		}
	})
	wg.Wait()
}
