package link

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/hutch-sandbox/hutch/internal/splice"
)

// How long the host waits for an OK before it says HELLO again, with a
// new nonce: short, since a guest is usually there; longer each time,
// since one that is not (frozen, booting) gains nothing from more lines.
const (
	helloFirst = 100 * time.Millisecond
	helloMax   = time.Second
)

// Host is the shim's end of a link. It keeps a session up with whatever
// guest is at the other end of its raw connection, and opens streams to
// it. Its methods are safe for concurrent use.
type Host struct {
	w      *wire
	log    *slog.Logger
	ctx    context.Context // ends with the link
	cancel context.CancelFunc
	okc    chan accepted // the pump's OK for the current nonce, to run
	wg     sync.WaitGroup

	mu      sync.Mutex
	nonce   string // of the HELLO in force; "" outside a handshake
	sess    *yamux.Session
	changed chan struct{} // closed, and replaced, when sess or err change
	err     error         // why the link ended; nil while it lives
	lns     map[net.Listener]struct{}
}

// accepted is a guest's OK for the current nonce, with the epoch the
// pump feeds from the byte after it.
type accepted struct {
	nonce string
	ep    *epoch
}

// NewHost starts a link on raw, the host's end of the guest's standard
// input, and returns at once; Wait says when the link is up. The Host owns
// raw: it closes it when the link ends. log (nil: none) gets the link's
// comings and goings at debug level.
func NewHost(raw net.Conn, log *slog.Logger) *Host {
	ctx, cancel := context.WithCancel(context.Background())
	h := &Host{
		w:       &wire{raw: raw},
		log:     orDiscard(log),
		ctx:     ctx,
		cancel:  cancel,
		okc:     make(chan accepted, 1),
		changed: make(chan struct{}),
		lns:     map[net.Listener]struct{}{},
	}
	h.wg.Add(2)
	go h.pump()
	go h.run()
	return h
}

// pump is the only reader of raw. It never writes, so a guest busy writing
// to it is always read, whatever this end's writers wait for.
func (h *Host) pump() {
	defer h.wg.Done()
	var (
		sc  scanner
		fr  framer
		ep  *epoch
		buf = make([]byte, readBuf)
	)
	for {
		n, err := h.w.raw.Read(buf)
		p := buf[:n]
		for len(p) > 0 {
			if ep != nil {
				rest, ok := fr.feed(p, ep.deliver)
				if ok {
					break
				}
				h.log.Debug("link: session over, scanning")
				ep.end()
				ep, fr, sc = nil, framer{drop: fromGuest}, scanner{}
				p = rest
				continue
			}
			k, m := sc.scan(p)
			p = p[k:]
			if m.kind == msgOK {
				ep = h.accept(m.nonce)
				fr = framer{drop: fromGuest}
			}
		}
		if err != nil {
			if ep != nil {
				ep.end()
			}
			h.shutdown(fmt.Errorf("%w: reading: %w", ErrClosed, err))
			return
		}
	}
}

// accept returns a new epoch, and passes it to run, if nonce is that of
// the HELLO in force; nil otherwise.
func (h *Host) accept(nonce string) *epoch {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.nonce == "" || nonce != h.nonce {
		return nil
	}
	h.nonce = ""
	ep := newEpoch(h.w, false)
	h.okc <- accepted{nonce: nonce, ep: ep} // free: one OK per handshake
	return ep
}

// run shakes hands, runs a session until it ends, and again, until the link
// ends.
func (h *Host) run() {
	defer h.wg.Done()
	flush := bytes.Repeat([]byte{flushByte}, flushLen)
	for {
		a, err := h.handshake(flush)
		if err != nil {
			if a.ep != nil {
				a.ep.end() // the pump may be waiting to feed it
			}
			h.shutdown(err)
			return
		}
		sess, err := yamux.Client(a.ep, yamuxConfig(h.log))
		if err != nil {
			a.ep.end()
			h.shutdown(fmt.Errorf("link: starting yamux: %w", err))
			return
		}
		h.log.Debug("link: session up", "nonce", a.nonce)
		h.set(sess)
		select {
		case <-sess.CloseChan():
			h.log.Debug("link: session down", "nonce", a.nonce)
			h.set(nil)
		case <-h.ctx.Done():
			sess.Close()
			return
		}
	}
}

// handshake writes the flush and HELLOs until the pump reads an OK for the
// current one, then GO; it returns the epoch of the new session.
func (h *Host) handshake(flush []byte) (accepted, error) {
	if err := h.w.write(flush); err != nil {
		return accepted{}, err
	}
	wait := helloFirst
	for {
		h.mu.Lock()
		select {
		case a := <-h.okc: // came as the timer fired
			h.mu.Unlock()
			return a, h.w.write(line(goPrefix, a.nonce))
		default:
		}
		nonce := newNonce()
		h.nonce = nonce
		h.mu.Unlock()
		if err := h.w.write(line(helloPrefix, nonce)); err != nil {
			return accepted{}, err
		}
		t := time.NewTimer(wait)
		select {
		case a := <-h.okc:
			t.Stop()
			// GO goes out before the session exists, so none of its
			// frames can come before it.
			return a, h.w.write(line(goPrefix, a.nonce))
		case <-t.C:
			wait = min(2*wait, helloMax)
		case <-h.ctx.Done():
			t.Stop()
			return accepted{}, ErrClosed
		}
	}
}

// set makes sess (nil: none) the session and wakes whoever waits for one.
func (h *Host) set(sess *yamux.Session) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sess = sess
	close(h.changed)
	h.changed = make(chan struct{})
}

// shutdown ends the link for err, the first time.
func (h *Host) shutdown(err error) {
	if !errors.Is(err, ErrClosed) {
		err = fmt.Errorf("%w: %w", ErrClosed, err)
	}
	h.mu.Lock()
	if h.err != nil {
		h.mu.Unlock()
		return
	}
	h.err = err
	close(h.changed)
	h.changed = make(chan struct{})
	h.nonce = "" // no more OKs
	select {
	case a := <-h.okc: // one run will not take: the pump may be feeding it
		defer a.ep.end()
	default:
	}
	sess := h.sess
	lns := h.lns
	h.lns = nil
	h.mu.Unlock()

	h.log.Debug("link: ended", "err", err)
	h.cancel()
	h.w.raw.Close() // wakes the pump, and a handshake writing
	if sess != nil {
		sess.Close()
	}
	for ln := range lns {
		ln.Close()
	}
}

// live returns the session if there is a live one, and a channel closed
// when that changes; or why the link ended.
func (h *Host) live() (*yamux.Session, <-chan struct{}, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return nil, nil, h.err
	}
	if h.sess != nil && h.sess.IsClosed() {
		return nil, h.changed, nil
	}
	return h.sess, h.changed, nil
}

// Wait returns when the link is up (nil), when ctx ends (its error), or
// when the link has ended (ErrClosed, wrapped). The link may go down again
// at any time; Dial waits for it.
func (h *Host) Wait(ctx context.Context) error {
	for {
		sess, changed, err := h.live()
		if err != nil {
			return err
		}
		if sess != nil {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Dial opens a stream on channel ch, waiting for the link to be up as long
// as ctx lets it. It fails with ctx's error, or ErrClosed (wrapped) once
// the link has ended. The stream is a net.Conn whose Close is a half-close
// (yamux's FIN): reads go on until the guest closes its side.
func (h *Host) Dial(ctx context.Context, ch byte) (net.Conn, error) {
	for {
		sess, changed, err := h.live()
		if err != nil {
			return nil, err
		}
		if sess != nil {
			st, err := sess.OpenStream()
			if err == nil {
				if _, err = st.Write([]byte{ch}); err == nil {
					return st, nil
				}
				st.Close()
			}
			if !errors.Is(err, yamux.ErrSessionShutdown) && !sess.IsClosed() {
				return nil, fmt.Errorf("link: opening a stream: %w", err)
			}
			// The session just ended: wait for the next.
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Serve accepts connections on ln and joins each to a new stream on
// channel ch, until ln fails or the link ends (then ErrClosed, wrapped).
// Close closes ln. Serve always returns a non-nil error.
func (h *Host) Serve(ln net.Listener, ch byte) error {
	h.mu.Lock()
	if h.err != nil {
		h.mu.Unlock()
		ln.Close()
		return h.err
	}
	h.lns[ln] = struct{}{}
	h.mu.Unlock()
	for {
		c, err := ln.Accept()
		if err != nil {
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.err != nil {
				return h.err
			}
			delete(h.lns, ln)
			return fmt.Errorf("link: accepting on %s: %w", ln.Addr(), err)
		}
		if !h.spawn(func() { h.join(c, ch) }) {
			c.Close()
		}
	}
}

// spawn runs f in a goroutine Close waits for, unless the link has ended.
func (h *Host) spawn(f func()) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return false
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		f()
	}()
	return true
}

// join splices c to a new stream on ch.
func (h *Host) join(c net.Conn, ch byte) {
	// A client that never closes its connection must not hold Close.
	stop := context.AfterFunc(h.ctx, func() { c.Close() })
	defer stop()
	st, err := h.Dial(h.ctx, ch)
	if err != nil {
		h.log.Debug("link: no stream for a connection", "channel", ch, "err", err)
		c.Close()
		return
	}
	splice.Join(c, nil, st, nil, 0)
}

// Close ends the link: the session, its streams, connections being joined
// by Serve, Serve's listeners and the raw connection are closed. It
// returns when all of its goroutines have.
func (h *Host) Close() error {
	h.shutdown(ErrClosed)
	h.wg.Wait()
	return nil
}
