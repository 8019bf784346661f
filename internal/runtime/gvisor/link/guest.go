package link

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// How long the guest waits to read again after EOF (no host right now):
// soon, since a restore brings a host at once; less often as time goes by.
const (
	eofFirst = 20 * time.Millisecond
	eofMax   = 200 * time.Millisecond
)

// Guest is envd's end of a link. It answers whatever host comes to its raw
// connection, session after session, and hands the streams each opens to
// the listener of their channel. Its methods are safe for concurrent use.
type Guest struct {
	w       *wire
	log     *slog.Logger
	lns     []*listener
	done    chan struct{} // closed by Close
	stopped chan struct{} // closed when the pump has returned
	once    sync.Once
	wg      sync.WaitGroup
}

// NewGuest starts a link on raw, the guest's standard input, with listeners
// for channels 0 to channels-1, and returns at once. The Guest never closes
// raw (envd must not: it is its only link, for good); the caller owns it.
// For fd 0, pass net.FileConn(os.Stdin): a non-blocking duplicate of fd 0,
// on the netpoller, so that Close can interrupt a read with a deadline.
// Keep os.Stdin open (a File made with os.NewFile(0, …) and dropped would
// close fd 0 when collected). log (nil: none) gets the link's comings and
// goings at debug level.
func NewGuest(raw net.Conn, channels int, log *slog.Logger) *Guest {
	g := &Guest{
		w:       &wire{raw: raw},
		log:     orDiscard(log),
		done:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	for ch := range min(channels, 256) {
		g.lns = append(g.lns, &listener{g: g, ch: byte(ch), conns: make(chan net.Conn), closed: make(chan struct{})})
	}
	g.wg.Add(1)
	go g.pump()
	return g
}

// Listener returns the listener of channel ch: it yields one connection per
// stream a host opens on ch, whichever session it came through, until it
// or the Guest is closed. Its connections' Close is a half-close (yamux's
// FIN). Listener panics if ch is not below NewGuest's channels.
func (g *Guest) Listener(ch byte) net.Listener {
	if int(ch) >= len(g.lns) {
		panic(fmt.Sprintf("link: no channel %d (of %d)", ch, len(g.lns)))
	}
	return g.lns[ch]
}

// pump is the only reader of raw. It writes only short lines (OK, RESET),
// which the host's pump, always reading, takes.
func (g *Guest) pump() {
	defer g.wg.Done()
	defer close(g.stopped)
	var (
		sc   scanner
		fr   framer
		ep   *epoch
		last string // nonce of the last OK: the GO to start on
		wait = eofFirst
		buf  = make([]byte, readBuf)
	)
	end := func() {
		if ep != nil {
			ep.end()
			ep = nil
		}
		fr, sc = framer{}, scanner{}
	}
	defer func() { end() }()
	for {
		n, err := g.w.raw.Read(buf)
		p := buf[:n]
		for len(p) > 0 {
			if ep != nil {
				rest, ok := fr.feed(p, ep.deliver)
				if ok {
					break
				}
				g.log.Debug("link: session over, scanning")
				end()
				p = rest
				continue
			}
			k, m := sc.scan(p)
			p = p[k:]
			switch {
			case m.kind == msgHello:
				last = m.nonce
				if err := g.w.write(line(okPrefix, m.nonce)); err != nil {
					g.log.Debug("link: answering a host", "err", err)
				}
			case m.kind == msgGo && m.nonce == last:
				last = ""
				ep = g.start(m.nonce)
			}
		}
		if err == nil {
			wait = eofFirst
			continue
		}
		select {
		case <-g.done:
			return
		default:
		}
		if errors.Is(err, net.ErrClosed) {
			g.log.Debug("link: raw connection closed", "err", err)
			return
		}
		// No host right now. After a restore the same descriptor brings
		// the next one's bytes: whatever was said before is void.
		end()
		last = ""
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-g.done:
			t.Stop()
			return
		}
		wait = min(2*wait, eofMax)
	}
}

// start runs a yamux server on a new epoch, the host's GO for nonce just
// read, and returns the epoch (nil if yamux would not start).
func (g *Guest) start(nonce string) *epoch {
	ep := newEpoch(g.w, true)
	sess, err := yamux.Server(ep, yamuxConfig(g.log))
	if err != nil {
		g.log.Error("link: starting yamux", "err", err)
		ep.end()
		return nil
	}
	g.log.Debug("link: session up", "nonce", nonce)
	g.wg.Add(1)
	go g.accept(sess)
	return ep
}

// accept routes the session's streams until it ends.
func (g *Guest) accept(sess *yamux.Session) {
	defer g.wg.Done()
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			return
		}
		g.wg.Add(1)
		go g.route(st)
	}
}

// route reads st's channel and hands it to that channel's listener.
func (g *Guest) route(st net.Conn) {
	defer g.wg.Done()
	var ch [1]byte
	if _, err := io.ReadFull(st, ch[:]); err != nil {
		st.Close()
		return
	}
	if int(ch[0]) >= len(g.lns) {
		g.log.Debug("link: stream for no channel", "channel", ch[0])
		st.Close()
		return
	}
	l := g.lns[ch[0]]
	select {
	case l.conns <- st:
	case <-l.closed:
		st.Close()
	case <-g.stopped:
		st.Close()
	}
}

// Close ends the link on this side: the session and its streams, and the
// listeners. It never closes raw, unless raw does not support read
// deadlines (then closing it is the only way to stop the read). It returns
// when all of its goroutines have.
func (g *Guest) Close() error {
	g.once.Do(func() {
		close(g.done)
		for _, l := range g.lns {
			l.Close()
		}
		if err := g.w.raw.SetReadDeadline(time.Now()); err != nil {
			g.w.raw.Close()
		}
	})
	g.wg.Wait()
	_ = g.w.raw.SetReadDeadline(time.Time{})
	return nil
}

// listener is a channel's net.Listener.
type listener struct {
	g      *Guest
	ch     byte
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

// Accept returns the next stream opened on the channel, or ErrClosed (also
// net.ErrClosed) once the listener or its Guest is closed.
func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
	case <-l.g.stopped:
	}
	return nil, fmt.Errorf("%w: channel %d: %w", ErrClosed, l.ch, net.ErrClosed)
}

// Close stops the listener; streams opened on its channel from now on are
// closed. It does not close connections Accept returned.
func (l *listener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

// Addr returns the channel as an address of network "hutch-link".
func (l *listener) Addr() net.Addr { return addr(l.ch) }
