package egress

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// clientHello returns the first record a crypto/tls client sends for
// serverName ("" sends no SNI).
func clientHello(t testing.TB, serverName string) []byte {
	t.Helper()
	c1, c2 := net.Pipe()
	defer c2.Close()
	go func() {
		defer c1.Close()
		tls.Client(c1, &tls.Config{ServerName: serverName, InsecureSkipVerify: true}).Handshake()
	}()
	c2.SetDeadline(time.Now().Add(5 * time.Second))
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(c2, hdr); err != nil {
		t.Fatal(err)
	}
	rec := make([]byte, 5+(int(hdr[3])<<8|int(hdr[4])))
	copy(rec, hdr)
	if _, err := io.ReadFull(c2, rec[5:]); err != nil {
		t.Fatal(err)
	}
	return rec
}

// clientHelloOf returns the records of b that hold its first handshake
// message.
func clientHelloOf(b []byte) []byte {
	need, n := -1, 0
	for off := 0; off+5 <= len(b); {
		end := off + 5 + (int(b[off+3])<<8 | int(b[off+4]))
		n += end - off - 5
		if need < 0 && end-off > 5+4 {
			need = 4 + (int(b[off+6])<<16 | int(b[off+7])<<8 | int(b[off+8]))
		}
		off = end
		if need >= 0 && n >= need {
			return b[:end]
		}
	}
	return b
}

// fragment re-frames a handshake record's message into records of at
// most n bytes each, as a client may legally send it.
func fragment(rec []byte, n int) []byte {
	var out []byte
	for msg := rec[5:]; len(msg) > 0; {
		k := min(n, len(msg))
		out = append(out, 0x16, rec[1], rec[2], byte(k>>8), byte(k))
		out = append(out, msg[:k]...)
		msg = msg[k:]
	}
	return out
}

// readConn is a net.Conn that reads from r, at most chunk bytes a time (0:
// no bound), and then reports err (io.EOF when nil).
type readConn struct {
	r     io.Reader
	chunk int
	err   error
}

func (c *readConn) Read(p []byte) (int, error) {
	if c.chunk > 0 && len(p) > c.chunk {
		p = p[:c.chunk]
	}
	n, err := c.r.Read(p)
	if err == io.EOF && c.err != nil {
		err = c.err
	}
	return n, err
}

func (c *readConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *readConn) Close() error                     { return nil }
func (c *readConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *readConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *readConn) SetDeadline(time.Time) error      { return nil }
func (c *readConn) SetReadDeadline(time.Time) error  { return nil }
func (c *readConn) SetWriteDeadline(time.Time) error { return nil }

func TestSniffTLS(t *testing.T) {
	hello := clientHello(t, "Api.Example.COM")
	tests := []struct {
		name       string
		in         []byte
		chunk      int
		err        error // after in; nil: EOF
		want       string
		unreadable bool
	}{
		{"one read", hello, 0, nil, "api.example.com", false},
		{"byte by byte", hello, 1, nil, "api.example.com", false},
		{"fragmented records", fragment(hello, 100), 7, nil, "api.example.com", false},
		{"no SNI", clientHello(t, ""), 0, nil, "", false},
		{"followed by more data", append(bytes.Clone(hello), "early"...), 0, nil, "api.example.com", false},
		{"cut short by EOF", hello[:len(hello)/2], 0, nil, "", true},
		{"cut short by a timeout", hello[:len(hello)/2], 0, os.ErrDeadlineExceeded, "", true},
		{"header only", hello[:5], 0, nil, "", true},
		{"garbage record", []byte("\x16\x03\x01\x00\x05hello"), 0, nil, "", true},
		{"not a handshake version", []byte("\x16GET / HTTP/1.1\r\n\r\n"), 0, nil, "", true},
		{"oversized length", []byte("\x16\x03\x01\xff\xff"), 0, nil, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := sniff(&readConn{r: bytes.NewReader(tt.in), chunk: tt.chunk, err: tt.err}, maxPeek)
			if h.proto != protoTLS || h.name != tt.want || h.unreadable != tt.unreadable {
				t.Errorf("sniff = %v %q unreadable %v (%v), want tls %q unreadable %v", h.proto, h.name, h.unreadable, h.err, tt.want, tt.unreadable)
			}
			if !bytes.HasPrefix(tt.in, h.data) || !tt.unreadable && len(h.data) < len(clientHelloOf(tt.in)) {
				t.Errorf("data is %d bytes of %d, not a prefix holding the ClientHello", len(h.data), len(tt.in))
			}
		})
	}
}

func TestSniffTLSTooLarge(t *testing.T) {
	// A handshake message that claims 60000 bytes, in full-size records.
	msg := append([]byte{1, 0, 0xea, 0x60}, make([]byte, 60000)...)
	h := sniff(&readConn{r: bytes.NewReader(fragment(append([]byte{0x16, 3, 1, 0, 0}, msg...), 16384))}, maxPeek)
	if !h.unreadable || !errors.Is(h.err, errTooLarge) || len(h.data) != maxPeek {
		t.Errorf("sniff = unreadable %v, err %v, %d bytes; want unreadable, errTooLarge, %d bytes", h.unreadable, h.err, len(h.data), maxPeek)
	}
}

func TestSniffHTTP(t *testing.T) {
	tests := []struct {
		name       string
		in         string
		err        error // after in; nil: EOF
		proto      protocol
		want       string
		unreadable bool
	}{
		{"host", "GET / HTTP/1.1\r\nHost: Example.COM\r\n\r\n", nil, protoHTTP, "example.com", false},
		{"host with port", "GET / HTTP/1.1\r\nHost: example.com:8080\r\n\r\n", nil, protoHTTP, "example.com", false},
		{"trailing dot", "GET / HTTP/1.1\r\nHost: example.com.\r\n\r\n", nil, protoHTTP, "example.com", false},
		{"bare LF", "GET / HTTP/1.1\nHost: example.com\n\n", nil, protoHTTP, "example.com", false},
		{"leading empty lines", "\r\n\r\nPOST /x HTTP/1.1\r\nHost: example.com\r\nContent-Length: 3\r\n\r\nabc", nil, protoHTTP, "example.com", false},
		{"body not read", "POST / HTTP/1.1\r\nHost: example.com\r\nContent-Length: 99\r\n\r\nabc", nil, protoHTTP, "example.com", false},
		{"HTTP/1.0 without Host", "GET / HTTP/1.0\r\n\r\n", nil, protoHTTP, "", false},
		{"address Host", "GET / HTTP/1.1\r\nHost: 203.0.113.1:80\r\n\r\n", nil, protoHTTP, "", false},
		{"IPv6 Host", "GET / HTTP/1.1\r\nHost: [2001:db8::1]\r\n\r\n", nil, protoHTTP, "", false},
		{"absolute target", "GET http://example.com/x HTTP/1.1\r\n\r\n", nil, protoHTTP, "example.com", false},
		{"absolute target, same Host", "GET http://example.com/x HTTP/1.1\r\nHost: EXAMPLE.com:80\r\n\r\n", nil, protoHTTP, "example.com", false},
		{"absolute target, other Host", "GET http://good.test/x HTTP/1.1\r\nHost: evil.test\r\n\r\n", nil, protoHTTP, "", true},
		{"CONNECT", "CONNECT example.com:443 HTTP/1.1\r\n\r\n", nil, protoHTTP, "example.com", false},
		{"two Hosts", "GET / HTTP/1.1\r\nHost: good.test\r\nHost: evil.test\r\n\r\n", nil, protoHTTP, "", true},
		{"path in Host", "GET / HTTP/1.1\r\nHost: evil.test/.good.test\r\n\r\n", nil, protoHTTP, "", true},
		{"user in Host", "GET / HTTP/1.1\r\nHost: good.test@evil.test\r\n\r\n", nil, protoHTTP, "", true},
		{"brackets around a name", "GET / HTTP/1.1\r\nHost: [good.test]:80\r\n\r\n", nil, protoHTTP, "", true},
		{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", nil, protoHTTP, "", true},
		{"malformed version", "GET / HTTP/x\r\nHost: good.test\r\n\r\n", nil, protoHTTP, "", true},
		{"HTTP/0.9", "GET /\r\n\r\n", nil, protoHTTP, "", true},
		{"tab after the method", "GET\t/ HTTP/1.1\r\nHost: evil.test\r\n\r\n", nil, protoHTTP, "", true},
		{"many empty lines", strings.Repeat("\r\n", 20) + "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n", nil, protoHTTP, "evil.test", false},
		{"headers cut short", "GET / HTTP/1.1\r\nHost: good.test\r\n", nil, protoHTTP, "", true},
		{"headers too slow", "GET / HTTP/1.1\r\nHost: good.test\r\n", os.ErrDeadlineExceeded, protoHTTP, "", true},
		{"method too slow", "GE", os.ErrDeadlineExceeded, protoOther, "", true},
		{"method then EOF", "ping", nil, protoOther, "", false},
		{"binary", "\x00\x01\x02", nil, protoOther, "", false},
		{"long token", strings.Repeat("A", maxMethod+1), os.ErrDeadlineExceeded, protoOther, "", false},
		{"SSH banner", "SSH-2.0-OpenSSH_9.6\r\n", nil, protoOther, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, chunk := range []int{0, 1} {
				h := sniff(&readConn{r: strings.NewReader(tt.in), chunk: chunk, err: tt.err}, maxPeek)
				if h.proto != tt.proto || h.name != tt.want || h.unreadable != tt.unreadable {
					t.Errorf("chunk %d: sniff = %v %q unreadable %v (%v), want %v %q unreadable %v", chunk, h.proto, h.name, h.unreadable, h.err, tt.proto, tt.want, tt.unreadable)
				}
				if !strings.HasPrefix(tt.in, string(h.data)) {
					t.Errorf("chunk %d: data %q is not a prefix of the input", chunk, h.data)
				}
				if h.proto == protoHTTP && !h.unreadable && headerEnd(h.data) < 0 {
					t.Errorf("chunk %d: data %q does not hold the headers", chunk, h.data)
				}
			}
		})
	}
}

func TestSniffHTTPTooLarge(t *testing.T) {
	in := "GET / HTTP/1.1\r\nX-Pad: " + strings.Repeat("a", maxPeek) + "\r\nHost: evil.test\r\n\r\n"
	h := sniff(&readConn{r: strings.NewReader(in)}, maxPeek)
	if h.proto != protoHTTP || !h.unreadable || !errors.Is(h.err, errTooLarge) {
		t.Errorf("sniff = %v unreadable %v (%v), want http unreadable, errTooLarge", h.proto, h.unreadable, h.err)
	}
}

func TestNormalizeHost(t *testing.T) {
	tests := []struct {
		in   string
		want string
		bad  bool
	}{
		{"example.com", "example.com", false},
		{"EXAMPLE.com.:443", "example.com", false},
		{"_srv.example.com", "_srv.example.com", false},
		{"localhost", "localhost", false},
		{"", "", false},
		{"1.2.3.4", "", false},
		{"1.2.3.4:80", "", false},
		{"[::1]", "", false},
		{"[::1]:443", "", false},
		{"::1", "", false},
		{"a..b", "", true},
		{".example.com", "", true},
		{"exa mple.com", "", true},
		{"evil.test/.good.test", "", true},
		{"evil.test\\.good.test", "", true},
		{"[good.test]", "", true},
		{"good.test%00", "", true},
		{strings.Repeat("a", 64) + ".com", "", true},
		{strings.Repeat("a.", 127) + "com", "", true},
	}
	for _, tt := range tests {
		if got, bad := normalizeHost(tt.in); got != tt.want || bad != tt.bad {
			t.Errorf("normalizeHost(%q) = %q, %v; want %q, %v", tt.in, got, bad, tt.want, tt.bad)
		}
	}
}

// FuzzSniff checks that no input makes sniff panic, and that what it
// keeps for replay is exactly what it read.
func FuzzSniff(f *testing.F) {
	f.Add(clientHello(f, "example.com"), 0)
	f.Add(fragment(clientHello(f, "example.com"), 50), 3)
	f.Add([]byte("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"), 1)
	f.Add([]byte("GET http://a.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n"), 0)
	f.Add([]byte("\x16\x03\x01\x00\x05hello"), 0)
	f.Add([]byte("\x00\xff"), 0)
	f.Fuzz(func(t *testing.T, in []byte, chunk int) {
		h := sniff(&readConn{r: bytes.NewReader(in), chunk: chunk % 64}, maxPeek)
		if !bytes.HasPrefix(in, h.data) {
			t.Fatalf("data %q is not a prefix of the input", h.data)
		}
		if h.name != "" {
			if n, bad := normalizeHost(h.name); bad || n != h.name {
				t.Fatalf("name %q is not normalized", h.name)
			}
		}
	})
}
