package link

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/yamux"
)

// Channels carried by the link: the first byte of each stream the host
// opens says which of envd's servers gets it.
const (
	// ChannelControl is envd's control channel (the host's own calls).
	ChannelControl byte = 0
	// ChannelAPI is envd's API channel (what users reach through Hutch).
	ChannelAPI byte = 1
)

// ErrClosed is returned (wrapped) by a Host's methods once its link has
// ended, by Close or because the raw connection failed, and by a Guest's
// listeners once they or the Guest are closed.
var ErrClosed = errors.New("link: closed")

// errEpochOver is what an ended epoch's reads and writes return; yamux
// ends its session on it.
var errEpochOver = errors.New("link: session epoch over")

const (
	// hdrLen is the size of a yamux frame header: version, type, flags (2),
	// stream id (4), length (4).
	hdrLen = 12
	// window is yamux's stream window, configured on both ends, so no data
	// frame's body is longer.
	window = 256 << 10
	// flushLen is enough filler to carry a session from any state to a
	// frame boundary and one byte past it: the rest of a header, a full
	// body, one byte.
	flushLen = hdrLen + window + 1
	// flushByte can neither start a header (version 0) nor complete a
	// data header with a length within the window.
	flushByte = 0xFF

	maxLine  = 128 // a scanner keeps at most this much of a line
	keepTail = 32  // then its last keepTail bytes, more than any message

	readBuf = 32 << 10
)

// Lines of the handshake.
const (
	helloPrefix = "HUTCH-LINK "
	okPrefix    = "HUTCH-LINK-OK "
	goPrefix    = "HUTCH-LINK-GO "
	resetLine   = "HUTCH-LINK-RESET\n"
	magic       = "HUTCH-LINK"
	nonceLen    = 16
)

// msgKind is the kind of a handshake line.
type msgKind int

const (
	msgNone msgKind = iota
	msgHello
	msgOK
	msgGo
)

// msg is a handshake line a scanner recognised.
type msg struct {
	kind  msgKind
	nonce string
}

// newNonce returns 16 random hex digits.
func newNonce() string {
	var b [nonceLen / 2]byte
	rand.Read(b[:]) // never fails (crypto/rand since Go 1.24)
	return hex.EncodeToString(b[:])
}

// line formats a handshake line.
func line(prefix, nonce string) []byte { return []byte(prefix + nonce + "\n") }

// scanner finds handshake lines in a byte stream that may hold anything
// else. The zero value is ready.
type scanner struct {
	buf []byte // the current line so far (its last bytes once too long)
}

// scan consumes p up to and including the first line that is a handshake
// message, returning how many bytes it consumed and the message; it
// consumes all of p, returning msgNone, when there is none.
func (s *scanner) scan(p []byte) (int, msg) {
	for i, b := range p {
		if b == '\n' {
			m := parseLine(s.buf)
			s.buf = s.buf[:0]
			if m.kind != msgNone {
				return i + 1, m
			}
			continue
		}
		if len(s.buf) >= maxLine {
			// Resync: a message is shorter than keepTail, so the one this
			// line may end with is still whole.
			s.buf = s.buf[:copy(s.buf, s.buf[len(s.buf)-keepTail:])]
		}
		s.buf = append(s.buf, b)
	}
	return len(p), msg{}
}

// parseLine reads the message a line ends with: garbage without a newline
// (a dead session's frames) may come before it.
func parseLine(l []byte) msg {
	i := bytes.LastIndex(l, []byte(magic))
	if i < 0 {
		return msg{}
	}
	m := string(l[i:])
	for _, c := range []struct {
		prefix string
		kind   msgKind
	}{{okPrefix, msgOK}, {goPrefix, msgGo}, {helloPrefix, msgHello}} {
		if n, ok := strings.CutPrefix(m, c.prefix); ok && validNonce(n) {
			return msg{kind: c.kind, nonce: n}
		}
	}
	return msg{}
}

// validNonce reports whether n is 16 lowercase hex digits.
func validNonce(n string) bool {
	if len(n) != nonceLen {
		return false
	}
	for _, c := range []byte(n) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// framer follows yamux's framing through a byte stream. The zero value is
// at a frame boundary.
type framer struct {
	hdr  [hdrLen]byte
	n    int    // bytes of hdr received
	body uint32 // bytes of the current frame's body still to come
	// drop, when set, says which whole frames never reach the session
	// (skip: bytes of a dropped frame's body still to come).
	drop func(hdr []byte) bool
	skip uint32
}

// boundary reports whether the stream is between two frames.
func (f *framer) boundary() bool { return f.n == 0 && f.body == 0 && f.skip == 0 }

// fromGuest is the host's drop rule: frames that open something (the SYN
// flag: a stream, a ping). The host never accepts a stream, and a ping
// makes yamux start a goroutine that waits to answer it: a guest sending
// them by the thousand, never reading, grew a shim by hundreds of MiB
// (review 21).
func fromGuest(h []byte) bool {
	const synFlag = 1
	return binary.BigEndian.Uint16(h[2:4])&synFlag != 0
}

// validPrefix reports whether the n bytes of the header so far can start a
// header yamux would take: version 0, a known type (data, window update,
// ping, go away) and, for data, a body no longer than the window.
func validPrefix(h []byte) bool {
	if len(h) >= 1 && h[0] != 0 {
		return false
	}
	if len(h) >= 2 && h[1] > 3 {
		return false
	}
	if len(h) == hdrLen && h[1] == 0 && binary.BigEndian.Uint32(h[8:]) > window {
		return false
	}
	return true
}

// feed passes p through the framing, handing deliver whole headers and
// body bytes as they come. It returns ok false when the session must end:
// p held a byte that cannot start a header, returned in rest with what
// followed it (and what was held of that header), or deliver failed, rest
// being what was not delivered.
func (f *framer) feed(p []byte, deliver func([]byte) error) (rest []byte, ok bool) {
	for len(p) > 0 {
		if f.skip > 0 {
			k := min(uint32(len(p)), f.skip)
			f.skip -= k
			p = p[k:]
			continue
		}
		if f.body > 0 {
			k := min(uint32(len(p)), f.body)
			if err := deliver(p[:k]); err != nil {
				return p, false
			}
			f.body -= k
			p = p[k:]
			continue
		}
		k := copy(f.hdr[f.n:], p)
		if !validPrefix(f.hdr[:f.n+k]) {
			rest = append(append([]byte(nil), f.hdr[:f.n]...), p...)
			*f = framer{}
			return rest, false
		}
		f.n += k
		p = p[k:]
		if f.n < hdrLen {
			return nil, true
		}
		if f.drop != nil && f.drop(f.hdr[:]) {
			f.n = 0
			if f.hdr[1] == 0 {
				f.skip = binary.BigEndian.Uint32(f.hdr[8:])
			}
			continue
		}
		if err := deliver(f.hdr[:]); err != nil {
			return p, false
		}
		f.n = 0
		if f.hdr[1] == 0 {
			f.body = binary.BigEndian.Uint32(f.hdr[8:])
		}
	}
	return nil, true
}

// wire is an end's raw connection and the lock that keeps what is written
// to it whole: a frame, a handshake line, a flush.
type wire struct {
	raw net.Conn
	mu  sync.Mutex
}

// write writes bufs to raw as one piece.
func (w *wire) write(bufs ...[]byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writeLocked(bufs...)
}

// writeLocked is write with w.mu held.
func (w *wire) writeLocked(bufs ...[]byte) error {
	nb := net.Buffers(bufs)
	if _, err := nb.WriteTo(w.raw); err != nil {
		return fmt.Errorf("link: writing: %w", err)
	}
	return nil
}

// epoch is what one yamux session runs on: reads come from the pump
// through a pipe, writes go to the raw connection until the epoch ends.
// Ending it never closes the raw connection.
type epoch struct {
	w     *wire
	pr    *io.PipeReader
	pw    *io.PipeWriter
	reset bool // write resetLine when ending (the guest's side)
	dead  atomic.Bool

	// Guarded by w.mu.
	held []byte // a data header waiting for its body
	out  framer // the framing of what was written
}

// newEpoch returns an epoch writing to w; a guest's (reset) tells the host
// when it ends.
func newEpoch(w *wire, reset bool) *epoch {
	pr, pw := io.Pipe()
	return &epoch{w: w, pr: pr, pw: pw, reset: reset}
}

// deliver hands bytes read from the raw connection to the session; it
// returns when the session has read them all, or the epoch ended.
func (e *epoch) deliver(p []byte) error {
	_, err := e.pw.Write(p)
	return err
}

// Read is the session's read.
func (e *epoch) Read(p []byte) (int, error) { return e.pr.Read(p) }

// Write is the session's write. yamux writes a data frame's header, then
// its body: the header is held until the body comes, so that the frame
// reaches the raw connection in one piece, and an epoch ending between
// the two writes leaves the stream at a frame boundary.
func (e *epoch) Write(p []byte) (int, error) {
	e.w.mu.Lock()
	defer e.w.mu.Unlock()
	if e.dead.Load() {
		return 0, errEpochOver
	}
	if len(e.held) == 0 && e.out.boundary() && len(p) == hdrLen && p[1] == 0 && binary.BigEndian.Uint32(p[8:]) > 0 {
		e.held = append(e.held, p...)
		return len(p), nil
	}
	held := e.held
	e.held = e.held[:0]
	if err := e.w.writeLocked(held, p); err != nil {
		return 0, err
	}
	e.out.feed(held, nop)
	e.out.feed(p, nop)
	return len(p), nil
}

// nop is a framer's deliver for following a stream without delivering it.
func nop([]byte) error { return nil }

// Close ends the epoch; yamux calls it when its session ends.
func (e *epoch) Close() error {
	e.end()
	return nil
}

// end ends the epoch: writes fail from now on, the session's reads fail
// and the pump's deliveries too. On the guest's side it completes a frame
// cut short (with zeros; yamux does not cut frames, so this is belt and
// braces) and writes resetLine, for the host to end its session too. The
// host's side writes nothing: it flushes before its next handshake anyway,
// and its pump, which ends epochs, must never wait for a write.
func (e *epoch) end() {
	if !e.reset {
		e.dead.Store(true)
	} else {
		e.w.mu.Lock()
		if !e.dead.Swap(true) {
			e.held = nil
			for !e.out.boundary() {
				k := e.out.body
				if e.out.n > 0 {
					k = uint32(hdrLen - e.out.n)
				}
				pad := make([]byte, k)
				e.out.feed(pad, nop)
				_ = e.w.writeLocked(pad) // no host now: nothing to tell
			}
			_ = e.w.writeLocked([]byte(resetLine))
		}
		e.w.mu.Unlock()
	}
	e.pr.CloseWithError(errEpochOver)
	e.pw.CloseWithError(errEpochOver)
}

// yamuxConfig is the session configuration of both ends.
func yamuxConfig(log *slog.Logger) *yamux.Config {
	c := yamux.DefaultConfig()
	// A checkpointed guest is frozen, not dead: no timer may end a session,
	// and an idle link sends nothing.
	c.EnableKeepAlive = false
	c.StreamOpenTimeout = 0
	c.MaxStreamWindowSize = window
	c.LogOutput = nil
	c.Logger = yamuxLogger{log}
	return c
}

// yamuxLogger passes yamux's log lines to slog, at debug level: a session
// dying on a restore's garbage is expected.
type yamuxLogger struct{ log *slog.Logger }

func (l yamuxLogger) Print(v ...any) { l.log.Debug(strings.TrimSpace(fmt.Sprint(v...))) }
func (l yamuxLogger) Printf(format string, v ...any) {
	l.log.Debug(strings.TrimSpace(fmt.Sprintf(format, v...)))
}
func (l yamuxLogger) Println(v ...any) { l.log.Debug(strings.TrimSpace(fmt.Sprintln(v...))) }

// orDiscard returns log, or a logger that drops everything when log is nil.
func orDiscard(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return log
}

// addr is the address of a channel's listener and its connections' ends.
type addr byte

// Network returns "hutch-link".
func (addr) Network() string { return "hutch-link" }

// String returns the channel, "ch<n>".
func (a addr) String() string { return fmt.Sprintf("ch%d", byte(a)) }
