package egress

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// A plain-HTTP connection carries any number of requests, each naming its
// own server. Spliced after the first, a kept-alive connection opened for
// an allowed name would reach every other name served at the same address
// (review 2, N1). So unless the address is open to every name, the proxy
// reads the head of each request on its way to the server and passes it
// only if it names the server the connection was judged for; bodies and
// responses pass untouched. The framing is parsed strictly (one of
// Content-Length and chunked, canonical chunk lines): where the proxy and
// the server could disagree on where a body ends, a request could hide in
// one, so the proxy refuses instead. net/http's server does not fit here,
// since it rewrites what it forwards; this is the little of HTTP/1 framing
// a transparent relay needs, written by hand.

// errOtherServer ends a relay at a request that names another server than
// the connection's first, or none the proxy can read.
var errOtherServer = errors.New("a later request names another server")

// drainTimeout bounds how long the server may take to answer the requests
// before a refused one once it has seen the end of them.
const drainTimeout = 5 * time.Second

// maxChunkLine bounds a chunk-size line or a trailer line.
const maxChunkLine = 4096

// relayHTTP carries an allowed plain-HTTP connection whose first request,
// with whatever followed it, is in data: requests one by one to up,
// responses as they come back to client. A request for another server is
// answered with a 403 after the server has answered those before it, and
// ends the connection.
func relayHTTP(client, up net.Conn, data []byte, first hello, dst netip.AddrPort) {
	var refusing atomic.Bool
	respDone := make(chan error, 1)
	go func() {
		_, err := io.Copy(client, up)
		switch {
		case err != nil:
			client.Close()
			up.Close()
		case !refusing.Load():
			closeWrite(client)
		}
		respDone <- err
	}()
	br := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(data), client), maxChunkLine)
	later, err := forwardRequests(up, br, first.name)
	switch {
	case err == nil: // the client has finished
		closeWrite(up)
		<-respDone
	case errors.Is(err, errOtherServer):
		refusing.Store(true)
		closeWrite(up)
		select {
		case <-respDone:
		case <-time.After(drainTimeout):
			up.Close()
			<-respDone
		}
		refuse(client, later, dst)
	default:
		client.Close()
		up.Close()
		<-respDone
	}
}

// forwardRequests copies requests from br to up while each names name. It
// returns nil when br ends between requests, and errOtherServer with what
// the proxy read of a request that names another server.
func forwardRequests(up io.Writer, br *bufio.Reader, name string) (hello, error) {
	for {
		head, err := readHead(br)
		if err == io.EOF {
			return hello{}, nil
		}
		h := hello{proto: protoHTTP}
		if err != nil {
			h.unreadable, h.err = true, err
			return h, fmt.Errorf("%w: %w", errOtherServer, err)
		}
		var req *http.Request
		req, h.name, h.unreadable, h.err = parseHead(head)
		if h.err == nil {
			h.err = checkFraming(head)
			h.unreadable = h.err != nil
		}
		if h.unreadable || h.name != name {
			return h, errOtherServer
		}
		if _, err := up.Write(head); err != nil {
			return h, err
		}
		if upgrades(req) {
			// What follows is another protocol (WebSocket, a CONNECT
			// tunnel), no longer requests.
			_, err := io.Copy(up, br)
			return hello{}, err
		}
		switch {
		case len(req.TransferEncoding) > 0: // net/http admits only chunked
			err = copyChunked(up, br)
		case req.ContentLength > 0:
			_, err = io.CopyN(up, br, req.ContentLength)
		}
		if err != nil {
			return h, err
		}
	}
}

// readHead reads one request head, from its request line to the empty line
// that ends it, skipping empty lines before it as servers do. It returns
// io.EOF if br ends before a request starts.
func readHead(br *bufio.Reader) ([]byte, error) {
	var head []byte
	partial := false // the last line read was cut by the buffer's size
	for {
		line, err := br.ReadSlice('\n')
		empty := !partial && (string(line) == "\r\n" || string(line) == "\n")
		if empty && len(head) == 0 {
			continue
		}
		head = append(head, line...)
		switch {
		case len(head) > maxPeek:
			return nil, errTooLarge
		case err == bufio.ErrBufferFull:
			partial = true
			continue
		case err != nil && len(head) == 0:
			return nil, io.EOF
		case err != nil:
			return nil, fmt.Errorf("request head cut short: %w", err)
		case empty:
			return head, nil
		}
		partial = false
	}
}

// checkFraming refuses a head whose body length the proxy and a server
// could read differently: both Content-Length and Transfer-Encoding, or
// either more than once.
func checkFraming(head []byte) error {
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(head)))
	if _, err := tp.ReadLine(); err != nil {
		return err
	}
	hdr, err := tp.ReadMIMEHeader()
	if err != nil {
		return err
	}
	cl, te := len(hdr.Values("Content-Length")), len(hdr.Values("Transfer-Encoding"))
	if cl+te > 1 {
		return errors.New("ambiguous body length")
	}
	return nil
}

// upgrades reports whether req turns the connection into something else
// once answered.
func upgrades(req *http.Request) bool {
	if req.Method == http.MethodConnect {
		return true
	}
	for _, v := range req.Header.Values("Connection") {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				return true
			}
		}
	}
	return false
}

// copyChunked copies a chunked body and its trailer from br to w, as it is.
func copyChunked(w io.Writer, br *bufio.Reader) error {
	for {
		line, err := readLine(br)
		if err != nil {
			return err
		}
		if _, err := w.Write(line); err != nil {
			return err
		}
		size, err := chunkSize(line)
		if err != nil {
			return err
		}
		if size == 0 {
			for { // trailer fields, up to an empty line
				line, err := readLine(br)
				if err != nil {
					return err
				}
				if _, err := w.Write(line); err != nil {
					return err
				}
				if string(line) == "\r\n" {
					return nil
				}
			}
		}
		if _, err := io.CopyN(w, br, size); err != nil {
			return err
		}
		crlf, err := readLine(br)
		if err != nil {
			return err
		}
		if string(crlf) != "\r\n" {
			return errors.New("chunk not followed by CRLF")
		}
		if _, err := w.Write(crlf); err != nil {
			return err
		}
	}
}

// readLine reads a CRLF-terminated line of at most maxChunkLine bytes.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		return nil, errors.New("chunk line too long")
	}
	if err != nil {
		return nil, err
	}
	if !bytes.HasSuffix(line, []byte("\r\n")) {
		return nil, errors.New("chunk line not ended by CRLF")
	}
	return line, nil
}

// chunkSize parses a chunk-size line: hex digits, optionally extensions
// after ';', CRLF. Anything else (whitespace, a sign, 0x) is refused.
func chunkSize(line []byte) (int64, error) {
	s := string(line[:len(line)-2])
	if i := strings.IndexByte(s, ';'); i >= 0 {
		s = s[:i]
	}
	if s == "" || len(s) > 15 || strings.IndexFunc(s, func(r rune) bool {
		return !('0' <= r && r <= '9' || 'a' <= r && r <= 'f' || 'A' <= r && r <= 'F')
	}) >= 0 {
		return 0, fmt.Errorf("bad chunk size %q", s)
	}
	return strconv.ParseInt(s, 16, 64)
}
