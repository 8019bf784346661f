package cluster

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Signed /files URLs made without a domain name no sandbox (E2B's
// E2B_SANDBOX_URL form): the node that takes one finds the sandbox whose
// envd token signed it among its own, and, failing that, asks the other
// nodes, which each try their own tokens (tokens never leave their node).

// SetSigner gives the node the server's search of its own sandboxes for
// the one that signed a /files URL (method, query q). Call it before
// Start.
func (n *Node) SetSigner(f func(method string, q url.Values) (id string, ok bool)) { n.signer = f }

// FindSigned asks the other nodes which of their sandboxes signed a /files
// URL (method, query q): the node and the sandbox, if one did. Rationed as
// reads of unknown ids are (anyone can send a signed URL): ErrBusy past
// the ration.
func (n *Node) FindSigned(ctx context.Context, method string, q url.Values) (Peer, string, bool, error) {
	if !n.searches.allow(ctx) {
		return Peer{}, "", false, ErrBusy
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	type answer struct {
		p  Peer
		id string
	}
	found := make(chan answer, 1)
	asked := 0
	done := make(chan struct{})
	for name, r := range n.copyNodes() {
		if name == n.cfg.Name {
			continue
		}
		asked++
		p := Peer{Name: name, URL: r.URL}
		go func() {
			defer func() { done <- struct{}{} }()
			body, err := n.peerGet(ctx, p, "/cluster/v1/signed?"+url.Values{"method": {method}, "q": {q.Encode()}}.Encode())
			if err != nil {
				return
			}
			defer body.Close()
			b, _ := io.ReadAll(io.LimitReader(body, 256))
			if id := strings.TrimSpace(string(b)); id != "" {
				select {
				case found <- answer{p, id}:
				default:
				}
			}
		}()
	}
	for range asked {
		select {
		case a := <-found:
			return a.p, a.id, true, nil
		case <-done:
		}
	}
	select {
	case a := <-found:
		return a.p, a.id, true, nil
	default:
		return Peer{}, "", false, nil
	}
}

// signedHandler answers another node's FindSigned from this node's own
// sandboxes.
func (n *Node) signedHandler(w http.ResponseWriter, r *http.Request) {
	q, err := url.ParseQuery(r.URL.Query().Get("q"))
	if err != nil || n.signer == nil {
		http.NotFound(w, r)
		return
	}
	id, ok := n.signer(r.URL.Query().Get("method"), q)
	if !ok {
		http.NotFound(w, r)
		return
	}
	io.WriteString(w, id)
}
