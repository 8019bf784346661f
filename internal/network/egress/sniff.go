package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"slices"
	"strings"
	"time"
)

// maxPeek bounds what is read of a connection before it is judged. A
// ClientHello is at most 16 KiB in practice but may come fragmented into
// several records, each with its own header; 32 KiB of request headers is
// nginx's default limit, so no ordinary HTTP/1 request is cut short.
const maxPeek = 32 << 10

// maxMethod bounds how many token characters may open a connection before
// it is taken for something other than HTTP: the longest registered HTTP
// method ("UPDATEREDIRECTREF") has 17.
const maxMethod = 24

// protocol is what the first bytes of a connection turned out to be.
type protocol int

const (
	protoOther protocol = iota // neither TLS nor HTTP/1
	protoTLS
	protoHTTP
)

func (p protocol) String() string {
	switch p {
	case protoTLS:
		return "tls"
	case protoHTTP:
		return "http"
	}
	return "other"
}

// hello is what sniffing learned of a connection's first bytes.
type hello struct {
	proto protocol
	// name is the lower-case server name the client asked for (SNI or
	// Host, without port or trailing dot); "" when it gave none, or gave
	// an IP address (then the destination address decides anyway).
	name string
	// unreadable is set when the client speaks, or may be starting to
	// speak, a protocol that names its server but the name could not be
	// read: malformed, too large, too slow, ambiguous. Such a connection
	// is judged as if it carried the worst name (see allowsAnyName).
	unreadable bool
	// data is every byte read, to be replayed to the server.
	data []byte
	// err is why reading stopped early, for logs; nil when the name was
	// read.
	err error
}

// errTooLarge reports a client that sent maxPeek bytes without its
// ClientHello or request headers ending.
var errTooLarge = errors.New("first bytes exceed the peek limit")

// sniff reads the first bytes of c, up to limit, and learns which protocol
// they are and which server they name. It never writes to c; the caller
// bounds the time it takes with a read deadline on c.
func sniff(c net.Conn, limit int) hello {
	r := &recorder{c: c, limit: limit, buf: make([]byte, 0, 2048)}
	for {
		proto, skip, ok := classify(r.buf)
		if ok {
			switch proto {
			case protoTLS:
				return sniffTLS(r)
			case protoHTTP:
				return sniffHTTP(r, skip)
			}
			return hello{proto: protoOther, data: r.buf}
		}
		if r.err != nil {
			h := hello{proto: protoOther, data: r.buf, err: r.err}
			// A client that stopped for good (EOF) sent all it had, and
			// that is not a named protocol. One that stalled or rambled
			// may have been starting a request line.
			h.unreadable = len(r.buf) > 0 && !errors.Is(r.err, io.EOF)
			return h
		}
		r.fill()
	}
}

// classify tells the protocol from the first bytes b: TLS opens with a
// handshake record, HTTP/1 with a method token and a space (after the
// empty lines RFC 9112 §2.2 lets servers skip). ok is false while b is too
// short to tell; skip is how many leading line ends an HTTP request has.
func classify(b []byte) (p protocol, skip int, ok bool) {
	if len(b) == 0 {
		return protoOther, 0, false
	}
	if b[0] == 0x16 { // TLS record type handshake
		return protoTLS, 0, true
	}
	for skip < len(b) && (b[skip] == '\r' || b[skip] == '\n') {
		skip++
	}
	if skip > maxMethod {
		// Servers may skip any number of empty lines: what follows could
		// be a request, so it is read as one.
		return protoHTTP, skip, true
	}
	i := skip
	for i < len(b) && isTokenChar(b[i]) {
		i++
	}
	switch {
	case i-skip > maxMethod:
		return protoOther, 0, true
	case i == len(b):
		return protoOther, 0, false
	case i > skip && (b[i] == ' ' || b[i] == '\t' || b[i] == '\v' || b[i] == '\f'):
		// SP, or other whitespace some servers split the request line
		// on (RFC 9112 §3): net/http will not parse the latter, so it is
		// judged unreadable rather than missed.
		return protoHTTP, skip, true
	}
	return protoOther, 0, true
}

// isTokenChar reports whether c may appear in an HTTP token (RFC 9110
// §5.6.2), as a method is.
func isTokenChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// errSniffed aborts the handshake sniffTLS runs once it has the
// ClientHello.
var errSniffed = errors.New("client hello read")

// sniffTLS reads the ClientHello with crypto/tls itself rather than a
// parser of our own: a server handshake over the recorded bytes, aborted
// from GetConfigForClient as soon as the ClientHello has been parsed.
// crypto/tls reassembles a ClientHello split across segments and records
// and rejects malformed ones.
func sniffTLS(r *recorder) hello {
	var (
		name string
		got  bool
	)
	conf := &tls.Config{
		GetConfigForClient: func(info *tls.ClientHelloInfo) (*tls.Config, error) {
			name, got = info.ServerName, true
			return nil, errSniffed
		},
	}
	err := tls.Server(&replayConn{r: r}, conf).Handshake()
	h := hello{proto: protoTLS, data: r.buf}
	if !got {
		h.unreadable, h.err = true, err
		if r.err != nil {
			h.err = r.err // the cause, rather than crypto/tls's account of it
		}
		return h
	}
	h.name, h.unreadable = normalizeHost(name)
	if h.unreadable {
		h.err = errors.New("invalid server name in ClientHello")
	}
	return h
}

// sniffHTTP reads the request headers (skip bytes in) and takes the name
// from Host, or from the request target when it is an absolute URL (then
// a server ignores Host, RFC 9112 §3.2.2).
func sniffHTTP(r *recorder, skip int) hello {
	h := hello{proto: protoHTTP}
	// Search only what is new (and the 2 bytes before it that may start
	// the empty line), so a client sending a byte at a time costs linear
	// time.
	end, from := -1, skip
	for {
		for skip < len(r.buf) && (r.buf[skip] == '\r' || r.buf[skip] == '\n') {
			skip++ // more empty lines than classify saw
		}
		from = max(from, skip)
		if end = headerEnd(r.buf[from:]); end >= 0 {
			end += from
			break
		}
		if r.err != nil {
			h.data, h.unreadable, h.err = r.buf, true, r.err
			return h
		}
		from = max(skip, len(r.buf)-2)
		r.fill()
	}
	h.data = r.buf
	_, h.name, h.unreadable, h.err = parseHead(r.buf[skip:end])
	return h
}

// parseHead parses one HTTP/1 request head (request line to the empty line)
// and returns the request and the server it names, as hello's name and
// unreadable say.
func parseHead(head []byte) (req *http.Request, name string, unreadable bool, err error) {
	req, err = http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	if err != nil {
		return nil, "", true, err
	}
	if req.ProtoMajor != 1 {
		// HTTP/2 with prior knowledge ("PRI * HTTP/2.0"): the names are
		// in frames that follow.
		return req, "", true, errors.New("not HTTP/1")
	}
	if req.URL.Host != "" {
		// ReadRequest took the name from the target and dropped Host. A
		// server that prefers Host must not be told of another name.
		if host := hostHeader(head); host != "" {
			n1, bad1 := normalizeHost(req.Host)
			n2, bad2 := normalizeHost(host)
			if bad1 || bad2 || n1 != n2 {
				return req, "", true, errors.New("request target and Host name different servers")
			}
		}
	}
	name, unreadable = normalizeHost(req.Host)
	if unreadable {
		err = errors.New("invalid Host")
	}
	return req, name, unreadable, err
}

// hostHeader returns the Host header of a request head net/http has
// already parsed.
func hostHeader(head []byte) string {
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(head)))
	if _, err := tp.ReadLine(); err != nil {
		return ""
	}
	hdr, _ := tp.ReadMIMEHeader()
	return hdr.Get("Host")
}

// headerEnd returns the length of the request line and headers at the
// start of b, through the empty line that ends them, or -1 if b does not
// hold them all yet. Bare LF line ends are accepted as net/textproto does.
func headerEnd(b []byte) int {
	end := -1
	for _, sep := range []string{"\n\r\n", "\n\n"} {
		if i := bytes.Index(b, []byte(sep)); i >= 0 && (end < 0 || i+len(sep) < end) {
			end = i + len(sep)
		}
	}
	return end
}

// normalizeHost turns a Host header or SNI value into a name for the
// policy: port, brackets and trailing dot removed, lower case. An IP
// address is no name (""): the destination address decides. bad is set
// for values that are not DNS names, which a name rule must never be
// made to match ("evil.test/.good.test" ends in ".good.test").
func normalizeHost(hostport string) (name string, bad bool) {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	} else if inner, ok := strings.CutPrefix(hostport, "["); ok {
		host = strings.TrimSuffix(inner, "]") // "[::1]" without a port
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return "", false
	}
	if strings.HasPrefix(hostport, "[") {
		return "", true // brackets hold IPv6 addresses only
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "" {
		return "", false
	}
	if len(host) > 253 {
		return "", true
	}
	for label := range strings.SplitSeq(host, ".") {
		if label == "" || len(label) > 63 {
			return "", true
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return "", true
			}
		}
	}
	return host, false
}

// recorder reads a connection's first bytes into buf, keeping them for
// replay, and stops for good at the first error or at limit bytes.
type recorder struct {
	c     net.Conn
	limit int
	buf   []byte
	err   error // sticky: the read error, or errTooLarge
}

// fill reads once more from the connection into buf.
func (r *recorder) fill() {
	if r.err != nil {
		return
	}
	if len(r.buf) >= r.limit {
		r.err = errTooLarge
		return
	}
	if len(r.buf) == cap(r.buf) {
		// Double, as bytes.Buffer does, but never past limit.
		r.buf = slices.Grow(r.buf, min(max(cap(r.buf), 512), r.limit-len(r.buf)))
	}
	n, err := r.c.Read(r.buf[len(r.buf):min(cap(r.buf), r.limit)])
	r.buf = r.buf[:len(r.buf)+n]
	r.err = err
}

// replayConn is the connection crypto/tls reads the ClientHello from: it
// serves the bytes recorded so far, then records more. It fails writes,
// so the aborted handshake sends the client nothing, and ignores Close
// and deadlines, which belong to the real connection.
type replayConn struct {
	r   *recorder
	off int
}

var errReadOnly = errors.New("sniffing connection is read-only")

func (c *replayConn) Read(p []byte) (int, error) {
	for c.off == len(c.r.buf) {
		if c.r.err != nil {
			return 0, c.r.err
		}
		c.r.fill()
	}
	n := copy(p, c.r.buf[c.off:])
	c.off += n
	return n, nil
}

func (c *replayConn) Write([]byte) (int, error)        { return 0, errReadOnly }
func (c *replayConn) Close() error                     { return nil }
func (c *replayConn) LocalAddr() net.Addr              { return c.r.c.LocalAddr() }
func (c *replayConn) RemoteAddr() net.Addr             { return c.r.c.RemoteAddr() }
func (c *replayConn) SetDeadline(time.Time) error      { return nil }
func (c *replayConn) SetReadDeadline(time.Time) error  { return nil }
func (c *replayConn) SetWriteDeadline(time.Time) error { return nil }
