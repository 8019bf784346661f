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
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hutch-sandbox/hutch/internal/splice"
)

// A plain-HTTP connection carries any number of requests, each naming its
// own server. Spliced after the first, a kept-alive connection opened for
// an allowed name would reach every other name served at the same address
// (review 2, N1). So unless the address is open to every name, the proxy
// reads the head of each request on its way to the server and passes it
// only if it names the server the connection was judged for, and reads
// the head of each response on its way back, to know when the server has
// agreed to switch protocols (101): only then do the bytes that follow
// pass unread. Bodies pass untouched. The framing is parsed strictly (one
// of Content-Length and chunked, canonical chunk lines): where the proxy
// and the server could disagree on where a body ends, a request could hide
// in one, so the proxy refuses instead. CONNECT gets no tunnel here: a
// server that answered it 200 without opening one (net/http's does, unless
// the handler hijacks) would read what follows as requests. net/http's
// server and client do not fit, since they rewrite what they forward;
// this is the little of HTTP/1 framing a transparent relay needs, written
// by hand.

// errOtherServer ends a relay at a request that names another server than
// the connection's first, or none the proxy can read.
var errOtherServer = errors.New("a later request names another server")

// drainTimeout bounds how long the server may take to answer the requests
// before a refused one once it has seen the end of them.
const drainTimeout = 5 * time.Second

// maxChunkLine bounds a chunk-size line or a trailer line.
const maxChunkLine = 4096

// maxResponseHead bounds a response's head; servers send larger heads than
// clients (cookies, policies), so it is larger than maxPeek.
const maxResponseHead = 1 << 20

// maxPipelined is how many requests may await their answers at once; a
// client that sends more waits.
const maxPipelined = 64

// pending is a request on its way, as its response is read.
type pending struct {
	method string
	// switches: an Upgrade, so the server may turn the connection into
	// something other than HTTP; answer then says whether it did.
	switches bool
	answer   chan bool
}

// relayHTTP carries an allowed plain-HTTP connection whose first request,
// with whatever followed it, is in data: requests one by one to up,
// responses one by one back to client. A request for another server is
// answered with a 403 after the server has answered those before it, and
// ends the connection. Only when the server agrees to an Upgrade (101) do
// the bytes that follow pass unread: until it does, a
// request asking for one is just a request (review 3: the server ignored
// "Connection: Upgrade" and answered 200, and the relay, which had stopped
// reading, let a request for another server through).
func relayHTTP(client, up net.Conn, data []byte, first hello, dst netip.AddrPort) {
	var refusing, clientDone atomic.Bool
	reqs := make(chan pending, maxPipelined)
	respStopped := make(chan struct{})
	var respErr error
	go func() {
		defer close(respStopped)
		ur := bufio.NewReaderSize(&lingerReader{c: up, ended: &clientDone}, maxChunkLine)
		respErr = forwardResponses(client, ur, reqs)
		switch {
		case respErr != nil:
			client.Close()
			up.Close()
		case !refusing.Load():
			// The server has finished: whatever the client still sends
			// cannot be answered; it has splice.DefaultLinger to close.
			splice.CloseWrite(client)
			client.SetReadDeadline(time.Now().Add(splice.DefaultLinger))
		}
	}()
	br := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(data), client), maxChunkLine)
	later, err := forwardRequests(up, br, first.name, reqs, respStopped)
	close(reqs)
	switch {
	case err == nil: // the client has finished
		clientDone.Store(true)
		splice.CloseWrite(up)
		up.SetReadDeadline(time.Now().Add(splice.DefaultLinger))
		<-respStopped
	case errors.Is(err, errOtherServer):
		refusing.Store(true)
		splice.CloseWrite(up)
		select {
		case <-respStopped:
		case <-time.After(drainTimeout):
			up.Close()
			<-respStopped
		}
		refuse(client, later, dst)
	default:
		client.Close()
		up.Close()
		<-respStopped
	}
}

// forwardRequests copies requests from br to up while each names name,
// telling the response side of each. It returns nil when br ends between
// requests, and errOtherServer with what the proxy read of a request that
// names another server.
func forwardRequests(up io.Writer, br *bufio.Reader, name string, reqs chan<- pending, respStopped <-chan struct{}) (hello, error) {
	for {
		head, err := readHead(br, maxPeek)
		if err == io.EOF {
			return hello{}, nil
		}
		h := hello{proto: protoHTTP}
		if err != nil {
			if errors.Is(err, errTooLarge) {
				h.unreadable, h.err = true, err
				return h, fmt.Errorf("%w: %w", errOtherServer, err)
			}
			return h, err
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
		hasBody := len(req.TransferEncoding) > 0 || req.ContentLength > 0
		// A request with a body ends the connection (below), so it never
		// switches protocols, whatever it asks (review 5: an Upgrade with
		// a body skipped the rule, and a server that ignored both took the
		// body for a request the proxy never judged).
		p := pending{method: req.Method, switches: switches(req) && !hasBody}
		if p.switches {
			p.answer = make(chan bool, 1)
		}
		select {
		case reqs <- p:
		case <-respStopped:
			return h, errors.New("the server has finished")
		}
		if hasBody {
			// A server that does not read a body it did not expect (a GET's;
			// Python's http.server reads none a handler leaves) would take
			// the body for the next request, one the proxy never judged
			// (review 4). Told the connection ends, it reads no further, and
			// nothing more is sent on it.
			head = closingHead(head)
		}
		if _, err := up.Write(head); err != nil {
			return h, err
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
		if hasBody {
			return hello{}, nil // the client makes a new connection for more
		}
		if p.switches {
			select {
			case switched := <-p.answer:
				if switched {
					// What follows is another protocol (a WebSocket's
					// frames) the server agreed to speak.
					_, err := io.Copy(up, br)
					return hello{}, err
				}
			case <-respStopped:
				return h, errors.New("the server has finished")
			}
		}
	}
}

// forwardResponses copies the server's responses from ur to client, one
// for each request from reqs (after any interim 1xx), until reqs is closed
// and drained (nil), the server ends (nil) or an error. A response that
// switches protocols ends the parsing: the rest passes as it is.
func forwardResponses(client io.Writer, ur *bufio.Reader, reqs <-chan pending) error {
	for p := range reqs {
		for {
			head, err := readHead(ur, maxResponseHead)
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(head)), &http.Request{Method: p.method})
			if err != nil {
				return err
			}
			if _, err := client.Write(head); err != nil {
				return err
			}
			code := resp.StatusCode
			if p.switches && code == http.StatusSwitchingProtocols {
				p.answer <- true
				_, err := io.Copy(client, ur)
				return err
			}
			if code == http.StatusSwitchingProtocols {
				return errors.New("101 to a request that asked for no upgrade")
			}
			if code/100 == 1 {
				continue // 100 Continue, 103 Early Hints: the answer follows
			}
			if p.switches {
				p.answer <- false
			}
			switch {
			case p.method == http.MethodHead, code == http.StatusNoContent, code == http.StatusNotModified:
			case len(resp.TransferEncoding) > 0:
				err = copyChunked(client, ur)
			case resp.ContentLength >= 0:
				_, err = io.CopyN(client, ur, resp.ContentLength)
			default:
				// Delimited by the end of the connection.
				_, err = io.Copy(client, ur)
				return err
			}
			if err != nil {
				return err
			}
			break
		}
	}
	return nil
}

// lingerReader reads from a server's connection. Once the client has
// finished (ended) and the connection's read deadline passes, a read fails
// only if nothing came since the last deadline; otherwise the deadline
// moves on by splice.DefaultLinger: a long answer may take its time, a
// server that neither answers nor closes may not hold the connection.
type lingerReader struct {
	c        net.Conn
	ended    *atomic.Bool
	progress bool
}

func (r *lingerReader) Read(p []byte) (int, error) {
	for {
		n, err := r.c.Read(p)
		if n > 0 {
			r.progress = true
		}
		if n == 0 && errors.Is(err, os.ErrDeadlineExceeded) && r.ended.Load() && r.progress {
			r.progress = false
			r.c.SetReadDeadline(time.Now().Add(splice.DefaultLinger))
			continue
		}
		return n, err
	}
}

// readHead reads one message head, from its first line to the empty line
// that ends it, skipping empty lines before it as servers do, and at most
// limit bytes. It returns io.EOF if br ends before a message starts.
func readHead(br *bufio.Reader, limit int) ([]byte, error) {
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
		case len(head) > limit:
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

// checkFraming refuses a head whose body length or fields the proxy and
// a server could read differently: both Content-Length and
// Transfer-Encoding, either more than once, or a field folded over lines
// (obsolete in HTTP/1.1; servers join, reject or misread it).
func checkFraming(head []byte) error {
	for _, l := range bytes.Split(head, []byte("\n"))[1:] {
		if len(l) > 0 && (l[0] == ' ' || l[0] == '\t') {
			return errors.New("a header field folded over lines")
		}
	}
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

// closingHead returns a request head with its Connection and Keep-Alive
// fields replaced by "Connection: close".
func closingHead(head []byte) []byte {
	lines := bytes.SplitAfter(head, []byte("\n"))
	out := make([]byte, 0, len(head)+len("Connection: close\r\n"))
	out = append(out, lines[0]...) // the request line
	for _, l := range lines[1:] {
		field := bytes.TrimRight(l, "\r\n")
		if len(field) == 0 {
			break // the empty line that ends the head
		}
		name, _, _ := bytes.Cut(field, []byte(":"))
		if bytes.EqualFold(name, []byte("Connection")) || bytes.EqualFold(name, []byte("Keep-Alive")) {
			continue
		}
		out = append(out, l...)
	}
	return append(out, "Connection: close\r\n\r\n"...)
}

// switches reports whether req asks to turn the connection into another
// protocol once answered: an Upgrade header, and the upgrade token in
// Connection.
func switches(req *http.Request) bool {
	if req.Header.Get("Upgrade") == "" {
		return false
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
