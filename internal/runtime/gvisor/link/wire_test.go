package link

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
)

const nonceA, nonceB = "0123456789abcdef", "fedcba9876543210"

func TestScanner(t *testing.T) {
	long := strings.Repeat("x", 1000)
	tests := []struct {
		name  string
		in    string
		chunk int // feed this many bytes at a time (0: all at once)
		want  []msg
	}{
		{"hello", "HUTCH-LINK " + nonceA + "\n", 0, []msg{{msgHello, nonceA}}},
		{"ok", "HUTCH-LINK-OK " + nonceA + "\n", 0, []msg{{msgOK, nonceA}}},
		{"go", "HUTCH-LINK-GO " + nonceA + "\n", 0, []msg{{msgGo, nonceA}}},
		{"byte by byte", "HUTCH-LINK-OK " + nonceA + "\n", 1, []msg{{msgOK, nonceA}}},
		{"two, then garbage", "HUTCH-LINK " + nonceA + "\nHUTCH-LINK-GO " + nonceB + "\n\x00\x01", 0,
			[]msg{{msgHello, nonceA}, {msgGo, nonceB}}},
		{"garbage without a newline before", "\x00\x00\x01\xffHUTCH-LINK-OK " + nonceA + "\n", 0, []msg{{msgOK, nonceA}}},
		{"a long line ending with a message", long + "HUTCH-LINK-OK " + nonceA + "\n", 7, []msg{{msgOK, nonceA}}},
		{"an earlier message on the line is stale", "HUTCH-LINK-OK " + nonceA + "HUTCH-LINK-OK " + nonceB + "\n", 0,
			[]msg{{msgOK, nonceB}}},
		{"a message followed by more than the bound", "HUTCH-LINK-OK " + nonceA + strings.Repeat("a", 200) + "\n", 0, nil},
		{"short nonce", "HUTCH-LINK-OK 0123\n", 0, nil},
		{"long nonce", "HUTCH-LINK-OK " + nonceA + "0\n", 0, nil},
		{"uppercase nonce", "HUTCH-LINK-OK 0123456789ABCDEF\n", 0, nil},
		{"no newline yet", "HUTCH-LINK-OK " + nonceA, 0, nil},
		{"reset", resetLine, 0, nil},
		{"other text", "hello world\n", 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s scanner
			var got []msg
			in := []byte(tt.in)
			chunk := tt.chunk
			if chunk == 0 {
				chunk = len(in)
			}
			for len(in) > 0 {
				p := in[:min(chunk, len(in))]
				in = in[len(p):]
				for len(p) > 0 {
					n, m := s.scan(p)
					p = p[n:]
					if m.kind != msgNone {
						got = append(got, m)
					}
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// header returns a yamux header.
func header(typ byte, flags uint16, stream, length uint32) []byte {
	h := make([]byte, hdrLen)
	h[1] = typ
	binary.BigEndian.PutUint16(h[2:], flags)
	binary.BigEndian.PutUint32(h[4:], stream)
	binary.BigEndian.PutUint32(h[8:], length)
	return h
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func TestFramer(t *testing.T) {
	wu := header(1, 1, 1, 1000)
	data3 := cat(header(0, 0, 1, 3), []byte("abc"))
	tests := []struct {
		name     string
		in       []byte
		chunk    int
		wantOK   bool
		wantDone []byte // delivered
		wantRest []byte // when !wantOK
	}{
		{"window update", wu, 0, true, wu, nil},
		{"data", cat(data3, wu), 0, true, cat(data3, wu), nil},
		{"byte by byte", cat(data3, wu), 1, true, cat(data3, wu), nil},
		{"a full window", cat(header(0, 0, 1, window), make([]byte, 10)), 0, true, cat(header(0, 0, 1, window), make([]byte, 10)), nil},
		{"a line at a boundary", cat(data3, []byte("HUTCH-LINK x\n")), 0, false, data3, []byte("HUTCH-LINK x\n")},
		{"a line at a boundary, byte by byte", cat(data3, []byte("HUTCH-LINK x\n")), 1, false, data3, []byte("H")},
		{"unknown type", cat(wu, []byte{0, 7, 1, 2}), 0, false, wu, []byte{0, 7, 1, 2}},
		{"data longer than the window", cat(header(0, 0, 9, window+1), []byte("z")), 0, false, nil, cat(header(0, 0, 9, window+1), []byte("z"))},
		{"a line inside a body is body", cat(header(0, 0, 1, 5), []byte("HUTCH")), 0, true, cat(header(0, 0, 1, 5), []byte("HUTCH")), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f framer
			var done, rest []byte
			ok := true
			in := tt.in
			chunk := tt.chunk
			if chunk == 0 {
				chunk = len(in)
			}
			for ok && len(in) > 0 {
				p := in[:min(chunk, len(in))]
				in = in[len(p):]
				rest, ok = f.feed(p, func(b []byte) error {
					done = append(done, b...)
					return nil
				})
			}
			if ok != tt.wantOK {
				t.Fatalf("ok = %v, want %v", ok, tt.wantOK)
			}
			if !bytes.Equal(done, tt.wantDone) {
				t.Errorf("delivered %q, want %q", done, tt.wantDone)
			}
			if !bytes.Equal(rest, tt.wantRest) {
				t.Errorf("rest %q, want %q", rest, tt.wantRest)
			}
		})
	}
}

// TestFlushEndsAnySession shows that the host's flush brings a session that
// was cut anywhere in a frame (as a restore may) to a byte it refuses,
// before the flush ends: the HELLO after it reaches the scanner.
func TestFlushEndsAnySession(t *testing.T) {
	frames := map[string][]byte{
		"data, small":           header(0, 0, 1, 0x100),
		"data, a window":        header(0, 0, 1, window),
		"data, unknown stream":  header(0, 0, 99, 0),
		"window update, SYN":    header(1, 1, 3, 0xffffffff),
		"ping":                  header(2, 1, 0, 7),
		"go away":               header(3, 0, 0, 0),
		"data with SYN and FIN": header(0, 1|4, 5, 12),
	}
	flush := bytes.Repeat([]byte{flushByte}, flushLen)
	for name, h := range frames {
		// Cut inside the header, after it, and inside a body.
		cuts := []int{0, 1, 2, 4, 8, 9, 10, 11, 12}
		if h[1] == 0 && binary.BigEndian.Uint32(h[8:]) > 1 {
			cuts = append(cuts, 13, hdrLen+int(binary.BigEndian.Uint32(h[8:]))-1)
		}
		body := make([]byte, window)
		for _, cut := range cuts {
			var f framer
			prefix := cat(h, body)[:cut]
			if _, ok := f.feed(prefix, nop); !ok {
				t.Fatalf("%s cut at %d: refused before the flush", name, cut)
			}
			rest, ok := f.feed(flush, nop)
			if ok || len(rest) == 0 {
				t.Errorf("%s cut at %d: the flush did not end the session (ok %v, %d bytes left)", name, cut, ok, len(rest))
			}
		}
	}
}

// recorder is a raw connection that keeps what is written to it.
type recorder struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	closed bool
}

func (r *recorder) Read([]byte) (int, error) { select {} }
func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.Write(p)
}
func (r *recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	return nil
}
func (r *recorder) bytes() ([]byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.buf.Bytes()), r.closed
}
func (r *recorder) LocalAddr() net.Addr              { return addr(0) }
func (r *recorder) RemoteAddr() net.Addr             { return addr(0) }
func (r *recorder) SetDeadline(time.Time) error      { return nil }
func (r *recorder) SetReadDeadline(time.Time) error  { return nil }
func (r *recorder) SetWriteDeadline(time.Time) error { return nil }

// TestEpochEnd shows that a session ending never closes the raw connection,
// and that nothing an ended session writes reaches it: only the guest's
// RESET line.
func TestEpochEnd(t *testing.T) {
	tests := []struct {
		name  string
		reset bool // guest side
		byEnd bool // ended by the pump (else by yamux)
		want  string
	}{
		{"guest, by the pump", true, true, resetLine},
		{"guest, by yamux", true, false, resetLine},
		{"host, by the pump", false, true, ""},
		{"host, by yamux", false, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			ep := newEpoch(&wire{raw: rec}, tt.reset)
			sess, err := yamux.Client(ep, yamuxConfig(nil))
			if err != nil {
				t.Fatal(err)
			}
			st, err := sess.OpenStream()
			if err != nil {
				t.Fatal(err)
			}
			// Wait until the SYN is out.
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
				if b, _ := rec.bytes(); len(b) == hdrLen {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("no SYN written")
				}
			}
			before, _ := rec.bytes()
			if tt.byEnd {
				ep.end()
			} else {
				sess.Close()
			}
			select {
			case <-sess.CloseChan():
			case <-time.After(5 * time.Second):
				t.Fatal("session still up")
			}
			if _, err := st.Write([]byte("late")); err == nil {
				t.Error("a stream of the ended session wrote")
			}
			if _, err := sess.OpenStream(); err == nil {
				t.Error("the ended session opened a stream")
			}
			if _, err := ep.Write(header(1, 0, 1, 1)); !errors.Is(err, errEpochOver) {
				t.Errorf("ended epoch's Write: %v, want errEpochOver", err)
			}
			got, closed := rec.bytes()
			if closed {
				t.Error("the raw connection was closed")
			}
			if !bytes.HasPrefix(got, before) || string(got[len(before):]) != tt.want {
				t.Errorf("written after the end: %q, want %q", got[len(before):], tt.want)
			}
		})
	}
}

// TestEpochWritesWholeFrames shows a data header is held until its body
// comes, so an end between the two leaves nothing of the frame.
func TestEpochWritesWholeFrames(t *testing.T) {
	rec := &recorder{}
	ep := newEpoch(&wire{raw: rec}, true)
	frame := cat(header(0, 0, 1, 3), []byte("abc"))
	if _, err := ep.Write(frame[:hdrLen]); err != nil {
		t.Fatal(err)
	}
	if got, _ := rec.bytes(); len(got) != 0 {
		t.Fatalf("header written before its body: %q", got)
	}
	if _, err := ep.Write(frame[hdrLen:]); err != nil {
		t.Fatal(err)
	}
	if _, err := ep.Write(frame[:hdrLen]); err != nil {
		t.Fatal(err)
	}
	ep.end()
	got, _ := rec.bytes()
	if want := cat(frame, []byte(resetLine)); !bytes.Equal(got, want) {
		t.Errorf("written %q, want %q", got, want)
	}
}
