package tls

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// rawH2 is an HTTP/2 client written frame by frame, for what net/http's
// client never does: announce a stream window of 0 and so never let an
// answer's body out (a client that stopped reading). It answers the
// server's SETTINGS and PINGs, a well-behaved peer in every way but
// reading. (From review 23's attack code.)
type rawH2 struct {
	c       *tls.Conn
	fr      *http2.Framer
	wmu     sync.Mutex
	next    uint32
	headers atomic.Int64 // HEADERS frames received: answers begun
	resets  atomic.Int64 // RST_STREAM frames received
}

// dialRawH2 opens an HTTP/2 connection to s announcing a stream window of
// window bytes, reading what the server sends when read, or else never
// reading its socket at all (with windows wide open on both levels: the
// server's writes fill the socket's buffers, then block).
func dialRawH2(ctx context.Context, s *hutchtest.Server, roots *x509.CertPool, window uint32, read bool) (*rawH2, error) {
	raw, err := s.NS.DialContext(ctx, "tcp", s.Addr)
	if err != nil {
		return nil, err
	}
	c := tls.Client(raw, &tls.Config{RootCAs: roots, ServerName: "api." + s.Domain, NextProtos: []string{"h2"}})
	if err := c.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, err
	}
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		c.Close()
		return nil, fmt.Errorf("ALPN %q, want h2", p)
	}
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		c.Close()
		return nil, err
	}
	h := &rawH2{c: c, fr: http2.NewFramer(c, c), next: 1}
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := h.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: window}); err != nil {
		c.Close()
		return nil, err
	}
	if !read {
		h.fr.WriteWindowUpdate(0, 1<<30)
		return h, nil
	}
	go h.readLoop()
	return h, nil
}

func (h *rawH2) readLoop() {
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				h.wmu.Lock()
				h.fr.WriteSettingsAck()
				h.wmu.Unlock()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				h.wmu.Lock()
				h.fr.WritePing(true, f.Data)
				h.wmu.Unlock()
			}
		case *http2.MetaHeadersFrame:
			h.headers.Add(1)
		case *http2.RSTStreamFrame:
			h.resets.Add(1)
		}
	}
}

// get opens a stream: GET path on authority, with headers hdr (name,
// value, ...).
func (h *rawH2) get(authority, path string, hdr ...string) error {
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	enc.WriteField(hpack.HeaderField{Name: ":method", Value: "GET"})
	enc.WriteField(hpack.HeaderField{Name: ":scheme", Value: "https"})
	enc.WriteField(hpack.HeaderField{Name: ":authority", Value: authority})
	enc.WriteField(hpack.HeaderField{Name: ":path", Value: path})
	for i := 0; i+1 < len(hdr); i += 2 {
		enc.WriteField(hpack.HeaderField{Name: hdr[i], Value: hdr[i+1]})
	}
	h.wmu.Lock()
	defer h.wmu.Unlock()
	id := h.next
	h.next += 2
	return h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b.Bytes(), EndStream: true, EndHeaders: true})
}

func (h *rawH2) Close() { h.c.Close() }
