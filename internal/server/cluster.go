package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/hutch-sandbox/hutch/internal/cluster"
	"github.com/hutch-sandbox/hutch/internal/connlimit"
	"github.com/hutch-sandbox/hutch/internal/e2bapi"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// In a cluster (internal/cluster) every node takes every request. One
// that names a sandbox of another node — envd and port traffic by its
// E2b-Sandbox-Id or Host, API calls by their path — goes to that node's
// cluster listener in one hop; a create goes to the node placement picks,
// and on to the next when a node fails it. The node that receives a
// forwarded request serves it itself (Forwarded), so nothing is forwarded
// twice.

type forwardedCtx struct{}

// Forwarded is the handler of a node's cluster listener: it serves what
// other nodes forward here, as this node's own, never forwarding it again.
func (s *Server) Forwarded() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), forwardedCtx{}, true)))
	})
}

// clustered reports whether r may be sent on to another node.
func (s *Server) clustered(r *http.Request) bool {
	if s.cluster == nil {
		return false
	}
	fwd, _ := r.Context().Value(forwardedCtx{}).(bool)
	return !fwd
}

// busy answers a lookup the cluster rationed: a 429 to retry in a second
// (both SDKs retry a 429 with Retry-After).
func (s *Server) busy(w http.ResponseWriter, err error) {
	e2bapi.Write(w, s.logger, e2bapi.TooManyRequests(time.Second, err.Error()))
}

// lookupContext is r's context with its client's address, by which the
// cluster rations what anyone may make it look up.
func lookupContext(r *http.Request) context.Context {
	return cluster.WithClient(r.Context(), connlimit.Client(r.RemoteAddr))
}

// apiSandboxID is the sandbox an API call's path names, if any.
func apiSandboxID(path string) string {
	id := pathID(path, "/v2/sandboxes/", "/sandboxes/", "/v1/sandboxes/")
	if id == "metrics" { // GET /sandboxes/metrics names them in its query
		return ""
	}
	return id
}

// volumeID is the volume an API call's path names, if any.
func volumeID(path string) string { return pathID(path, "/volumes/", "/volumecontent/") }

// pathID is the path segment right after the first of prefixes that path
// starts with, or "".
func pathID(path string, prefixes ...string) string {
	for _, p := range prefixes {
		if rest, ok := strings.CutPrefix(path, p); ok {
			id, _, _ := strings.Cut(rest, "/")
			return id
		}
	}
	return ""
}

// forwardVolume sends r to the node that holds volume id when that is
// another node; it reports whether it did (and answered).
func (s *Server) forwardVolume(w http.ResponseWriter, r *http.Request, id string) bool {
	if !s.clustered(r) || id == "" {
		return false
	}
	p, found, err := s.cluster.VolumeOwner(lookupContext(r), id)
	if errors.Is(err, errdefs.ErrResourceExhausted) {
		s.busy(w, err)
		return true
	}
	if err != nil || !found || p.Self {
		return false
	}
	if p.URL == "" {
		e2bapi.WriteError(w, http.StatusBadGateway, fmt.Sprintf("volume %s is on node %s, which does not answer", id, p.Name), "")
		return true
	}
	s.toPeer(w, r, p, func(w http.ResponseWriter, err error) {
		e2bapi.WriteError(w, http.StatusBadGateway, fmt.Sprintf("volume %s is on node %s, which does not answer", id, p.Name), "")
	})
	return true
}

// forward sends r to the node that owns sandbox id when that is another
// node; it reports whether it did (and answered). edge marks envd and port
// traffic, whose errors are the edge proxy's.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, id string, edge bool) bool {
	if !s.clustered(r) || id == "" {
		return false
	}
	p, found, err := s.cluster.Owner(lookupContext(r), id)
	if errors.Is(err, errdefs.ErrResourceExhausted) {
		// Rationed: not "not found", which it may not be.
		s.busy(w, err)
		return true
	}
	if err != nil {
		// etcd out of reach: this node still serves its own sandboxes.
		s.logger.Debug("cluster: find a sandbox's node", "sandbox", id, "err", err)
		return false
	}
	if !found || p.Self {
		return false
	}
	if p.URL == "" {
		s.nodeGone(w, id, p.Name, edge)
		return true
	}
	s.toPeer(w, r, p, func(w http.ResponseWriter, err error) {
		s.logger.Debug("cluster: node unreachable", "node", p.Name, "sandbox", id, "err", err)
		if errors.Is(err, syscall.ECONNREFUSED) {
			s.cluster.Refused(p.Name)
		}
		s.nodeGone(w, id, p.Name, edge)
	})
	return true
}

// nodeGone answers for a sandbox whose node does not answer: the edge's
// 502 for its traffic, a 502 for API calls. Once the node's lease expires
// the cluster forgets the sandbox, and it is not found.
func (s *Server) nodeGone(w http.ResponseWriter, id, node string, edge bool) {
	if edge {
		e2bapi.WriteSandboxNotFound502(w, id)
		return
	}
	e2bapi.WriteError(w, http.StatusBadGateway, fmt.Sprintf("sandbox %s runs on node %s, which does not answer", id, node), "")
}

// toPeer proxies r to node p's cluster listener, streaming both ways
// (upgrades included); fail answers when p cannot be reached.
func (s *Server) toPeer(w http.ResponseWriter, r *http.Request, p cluster.Peer, fail func(http.ResponseWriter, error)) {
	target, err := url.Parse(p.URL)
	if err != nil {
		fail(w, err)
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = r.Host // the peer routes by it, as this node would
			pr.SetXForwarded()
			// A client's request, to be served as one: not one of the
			// nodes' own calls (the client's copy of the header, if any,
			// is replaced).
			pr.Out.Header.Set(cluster.ForwardHeader, "1")
		},
		Transport:     s.cluster.Transport(),
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(s.logger.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			if tooSlow(r) {
				e2bapi.Write(w, s.logger, errBodyTooSlow)
				return
			}
			fail(w, err)
		},
	}
	if err := http.NewResponseController(w).EnableFullDuplex(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.logger.Debug("full duplex", "err", err)
	}
	rp.ServeHTTP(w, r)
}

// placeCreate runs a create on the nodes placement orders for its
// template, the first that takes it answering. A node that cannot (it is
// unreachable, holds no lease, or is full) passes it to the next; any
// other answer, a refusal of the request included, is the answer. local
// runs the create here.
func (s *Server) placeCreate(w http.ResponseWriter, r *http.Request, local http.HandlerFunc) {
	if err := s.cluster.WaitInTouch(r.Context(), inTouchWait); err != nil {
		// Cut off from the cluster, this node cannot know where a
		// sandbox would be safe: the client retries through another.
		e2bapi.Write(w, s.logger, err)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		e2bapi.Write(w, s.logger, e2bapi.BadRequest("request body: "+err.Error()))
		return
	}
	var probe e2bapi.NewSandboxV2
	json.Unmarshal(body, &probe) // the create itself reports a bad body
	if err := cluster.CheckMetadata(probe.Metadata); err != nil {
		e2bapi.Write(w, s.logger, e2bapi.BadRequest(err.Error()))
		return
	}
	tpl := probe.TemplateID
	if tpl == "" {
		tpl = sandbox.DefaultTemplate
	}
	peers := s.cluster.Place(tpl)
	if len(probe.VolumeMounts) > 0 {
		// Volumes are on the disk of the node that made them: the
		// sandbox goes there, or, when no one node has them all, here,
		// to be refused.
		var names []string
		for _, v := range probe.VolumeMounts {
			names = append(names, v.Name)
		}
		p, ok := s.cluster.VolumesNode(keyID(r), names)
		if !ok {
			p = cluster.Peer{Name: "this node", Self: true}
		}
		peers = []cluster.Peer{p}
	}
	var last *bufferedResponse
	for i, p := range peers {
		if i > 0 {
			if err := s.cluster.WaitInTouch(r.Context(), inTouchWait); err != nil {
				e2bapi.Write(w, s.logger, err)
				return
			}
		}
		rec := newBufferedResponse()
		req := r.Clone(r.Context())
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		if p.Self {
			local(rec, req)
		} else {
			// Ended if this node falls out of touch meanwhile: a link that
			// died mid-create would hold it for ever.
			ctx, stop := s.cluster.WhileInTouch(r.Context())
			ctx, cancel := context.WithTimeout(ctx, createTimeout)
			s.toPeer(rec, req.WithContext(ctx), p, func(w http.ResponseWriter, err error) {
				s.logger.Info("cluster: a node failed a create; trying the next", "node", p.Name, "err", err)
				e2bapi.WriteError(w, http.StatusServiceUnavailable, fmt.Sprintf("node %s did not answer", p.Name), "")
			})
			cancel()
			stop()
		}
		last = rec
		if !retryElsewhere(rec.status) || i == len(peers)-1 {
			break
		}
		s.logger.Info("cluster: create refused by a node; trying the next", "node", p.Name, "status", rec.status)
	}
	if last == nil {
		e2bapi.Write(w, s.logger, fmt.Errorf("no node of the cluster can take a sandbox now: %w", errdefs.ErrUnavailable))
		return
	}
	last.writeTo(w)
}

// inTouchWait is how long a create waits for its node to be in touch with
// the cluster: an etcd election, 1–2 s, must not fail creates.
const inTouchWait = 5 * time.Second

// createTimeout bounds a create on another node (a template's ready
// command may take a while; a node that does not answer must not hold the
// client for ever).
const createTimeout = 5 * time.Minute

// retryElsewhere reports whether a node's answer to a create means another
// node might take it: the node was unreachable or cut off (502, 503, 504)
// or full (429 and 507 are what a cap answers).
func retryElsewhere(status int) bool {
	switch status {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout,
		http.StatusTooManyRequests, http.StatusInsufficientStorage:
		return true
	}
	return false
}

// bufferedResponse holds a create's answer until it is known to be the
// one to give (creates answer small JSON bodies).
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func newBufferedResponse() *bufferedResponse { return &bufferedResponse{header: http.Header{}} }

func (b *bufferedResponse) Header() http.Header { return b.header }
func (b *bufferedResponse) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.body.Write(p)
}
func (b *bufferedResponse) WriteHeader(code int) {
	if b.status == 0 {
		b.status = code
	}
}

func (b *bufferedResponse) writeTo(w http.ResponseWriter) {
	for k, v := range b.header {
		w.Header()[k] = v
	}
	if b.status == 0 {
		b.status = http.StatusOK
	}
	w.WriteHeader(b.status)
	w.Write(b.body.Bytes())
}

// clusterNodes answers GET /cluster/nodes: the cluster's nodes, their
// load and leases (`hutch cluster status`); 404 on a single node.
func (s *Server) clusterNodes(w http.ResponseWriter, r *http.Request) {
	if s.cluster == nil {
		e2bapi.WriteError(w, http.StatusNotFound, "this server is not in a cluster (hutch serve --cluster)", "")
		return
	}
	nodes, err := s.cluster.Nodes(r.Context())
	if err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	out := make([]e2bapi.ClusterNode, 0, len(nodes))
	for _, n := range nodes {
		cn := e2bapi.ClusterNode{Name: n.Name, URL: n.URL, Self: n.Self, Labels: n.Labels, Templates: len(n.Templates),
			Started: n.Started, Updated: n.Updated, CPUs: n.Capacity.CPUs, MemoryMB: n.Capacity.MemoryMB,
			MaxSandboxes: n.Capacity.Sandboxes, CPULoad: n.Load.CPU, MemoryUsedMB: n.Load.MemoryUsedMB,
			Running: n.Load.Running, Creating: n.Load.Creating, Warm: n.Load.Warm, LeaseSeconds: -1}
		if n.LeaseLeft >= 0 {
			cn.LeaseSeconds = int(n.LeaseLeft / time.Second)
		}
		out = append(out, cn)
	}
	writeJSON(w, http.StatusOK, out)
}

// placed makes create handler h place its sandbox in the cluster, when
// there is one.
func (s *Server) placed(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.clustered(r) {
			s.placeCreate(w, r, h)
			return
		}
		h(w, r)
	}
}
