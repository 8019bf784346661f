package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/template"
)

// Templates across nodes. A template built (or snapshotted) on one node
// is every node's: the node records it in etcd (templates/<ref>: the
// build, when it was built, the node holding it), and every other node
// pulls it from a node that holds it, layer by layer over the cluster
// listeners (GET /cluster/v1/templates/{ref}/manifest, GET
// /cluster/v1/layers/{id}; template.Store.Manifest, WriteLayer and Pull).
// Layers a node has already are not sent again. The newest build of a
// ref wins. A ref removed on its node is removed from etcd, and then from
// every node that pulled it.
//
// Not shared: Hutch's own templates (base, mcp-gateway), which each node
// builds from the recipes in its binary; the files of paused sandboxes and
// of forks, which stay with their sandboxes; and snapshots with memory
// (a checkpoint, not layers).

// templatesPrefix is where shared templates are recorded.
const templatesPrefix = Prefix + "templates/"

// templateEvery is how often a node compares its templates with the
// cluster's.
const templateEvery = 3 * time.Second

// templateRecord is a shared template in etcd.
type templateRecord struct {
	Ref   string    `json:"ref"`
	Build string    `json:"build"`
	Built time.Time `json:"built"`
	Node  string    `json:"node"`
}

// shared reports whether t is a template the cluster shares.
func shared(t *template.Template) bool {
	if template.Builtin(t.Name) || strings.HasPrefix(t.Name, template.PausedPrefix) || t.Checkpoint != "" {
		return false
	}
	return t.Snapshot == nil || t.Snapshot.Kind == template.SnapshotUser
}

// templateLoop keeps this node's templates the cluster's.
func (n *Node) templateLoop() {
	t := time.NewTicker(templateEvery)
	defer t.Stop()
	prev := map[string]string{}
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		if n.Ready() != nil {
			continue
		}
		next, err := n.syncTemplates(n.ctx, prev)
		if err != nil {
			n.log.Warn("cluster: share templates", "err", err)
		}
		if next != nil {
			prev = next
		}
	}
}

// syncTemplates compares this node's shared templates with etcd's record
// once: it records what was built here, pulls what was built elsewhere,
// and removes what was removed. prev is the node's templates (ref to
// build) at the last pass; it returns them as of now.
func (n *Node) syncTemplates(ctx context.Context, prev map[string]string) (map[string]string, error) {
	gctx, cancel := n.op(ctx)
	resp, err := n.cli.Get(gctx, templatesPrefix, clientv3.WithPrefix())
	cancel()
	if err != nil {
		return nil, err
	}
	type recorded struct {
		templateRecord
		rev int64
	}
	records := map[string]recorded{}
	for _, kv := range resp.Kvs {
		var r templateRecord
		if json.Unmarshal(kv.Value, &r) == nil {
			records[r.Ref] = recorded{r, kv.ModRevision}
			n.sawBuild(r.Build)
		}
	}
	ts, err := n.templates.List()
	if err != nil {
		return nil, err
	}
	local := map[string]*template.Template{}
	for _, t := range ts {
		if shared(t) {
			local[t.Ref()] = t
		}
	}
	now := map[string]string{}
	var errs []error
	for ref, t := range local {
		now[ref] = t.ID
		rec, ok := records[ref]
		switch {
		case ok && rec.Build == t.ID:
		case ok && !t.Built.After(rec.Built):
			// An older build here: the pull below replaces it.
		case !ok && n.seenBuild(t.ID):
			// The cluster had it and has it no more: removed elsewhere.
			if err := n.templates.Remove(t.ID, n.mgr.TemplateUsers); err != nil && !errdefs.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("remove template %s, removed elsewhere: %w", ref, err))
			} else {
				n.log.Info("cluster: removed a template removed elsewhere", "template", ref, "build", t.ID)
				delete(now, ref)
			}
		default:
			// Built here, and newer than the cluster's: recorded, unless
			// another node recorded one meanwhile.
			cmp := clientv3.Compare(clientv3.CreateRevision(templatesPrefix+ref), "=", 0)
			if ok {
				cmp = clientv3.Compare(clientv3.ModRevision(templatesPrefix+ref), "=", rec.rev)
			}
			pctx, cancel := n.op(ctx)
			_, err := n.cli.Txn(pctx).If(cmp).Then(clientv3.OpPut(templatesPrefix+ref,
				mustJSON(templateRecord{Ref: ref, Build: t.ID, Built: t.Built, Node: n.cfg.Name}))).Commit()
			cancel()
			if err != nil {
				errs = append(errs, err)
			} else {
				n.sawBuild(t.ID)
				n.log.Info("cluster: shared a template", "template", ref, "build", t.ID)
			}
		}
	}
	for ref, build := range prev {
		if _, ok := local[ref]; ok {
			continue
		}
		// Removed here since the last pass: removed from the cluster.
		if rec, ok := records[ref]; ok && rec.Build == build {
			dctx, cancel := n.op(ctx)
			_, err := n.cli.Txn(dctx).If(clientv3.Compare(clientv3.ModRevision(templatesPrefix+ref), "=", rec.rev)).
				Then(clientv3.OpDelete(templatesPrefix + ref)).Commit()
			cancel()
			if err != nil {
				errs = append(errs, err)
			}
			delete(records, ref)
		}
	}
	for ref, rec := range records {
		if t, ok := local[ref]; ok && (t.ID == rec.Build || t.Built.After(rec.Built)) {
			continue
		}
		if err := n.pullTemplate(ctx, rec.templateRecord); err != nil {
			errs = append(errs, fmt.Errorf("pull template %s: %w", ref, err))
			continue
		}
		now[ref] = rec.Build
	}
	return now, errors.Join(errs...)
}

// pullTemplate pulls the build rec names from a node that holds it: the
// node that recorded it, else any whose record lists the build.
func (n *Node) pullTemplate(ctx context.Context, rec templateRecord) error {
	var from []Peer
	nodes := n.copyNodes()
	if r, ok := nodes[rec.Node]; ok && rec.Node != n.cfg.Name {
		from = append(from, Peer{Name: r.Name, URL: r.URL})
	}
	for _, r := range nodes {
		if r.Name != rec.Node && r.Name != n.cfg.Name && n.holding(r, rec.Build) {
			from = append(from, Peer{Name: r.Name, URL: r.URL})
		}
	}
	if len(from) == 0 {
		return fmt.Errorf("no node holding build %s answers", rec.Build)
	}
	var errs []error
	for _, p := range from {
		start := time.Now()
		m, err := n.manifestFrom(ctx, p, rec.Build)
		if err == nil {
			_, err = n.templates.Pull(ctx, m, peerLayers{n, p})
		}
		if err == nil || errors.Is(err, errdefs.ErrAlreadyExists) {
			n.sawBuild(rec.Build)
			n.log.Info("cluster: pulled a template", "template", rec.Ref, "build", rec.Build, "from", p.Name, "took", time.Since(start).Round(time.Millisecond))
			return nil
		}
		errs = append(errs, fmt.Errorf("from %s: %w", p.Name, err))
	}
	return errors.Join(errs...)
}

// manifestFrom asks node p for the manifest of build.
func (n *Node) manifestFrom(ctx context.Context, p Peer, build string) (*template.Manifest, error) {
	body, err := n.peerGet(ctx, p, "/cluster/v1/templates/"+url.PathEscape(build)+"/manifest")
	if err != nil {
		return nil, err
	}
	defer body.Close()
	var m template.Manifest
	if err := json.NewDecoder(io.LimitReader(body, 16<<20)).Decode(&m); err != nil {
		return nil, fmt.Errorf("manifest from %s: %w", p.Name, err)
	}
	return &m, nil
}

// peerGet GETs path from node p's cluster listener.
func (n *Node) peerGet(ctx context.Context, p Peer, path string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(p.URL, "/")+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := n.cfg.Transport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		err := fmt.Errorf("%s %s: %s: %s", p.Name, path, resp.Status, strings.TrimSpace(string(msg)))
		if resp.StatusCode == http.StatusNotFound {
			err = fmt.Errorf("%w: %w", err, errdefs.ErrNotFound)
		}
		return nil, err
	}
	return resp.Body, nil
}

// peerLayers fetches layers from node p.
type peerLayers struct {
	n *Node
	p Peer
}

func (l peerLayers) Layer(ctx context.Context, id string) (io.ReadCloser, error) {
	return l.n.peerGet(ctx, l.p, "/cluster/v1/layers/"+url.PathEscape(id))
}

// sawBuild remembers that the cluster recorded build, so that a build
// here whose record goes away is taken as removed, not as new. Kept in
// DataDir/cluster/templates-seen across restarts.
func (n *Node) sawBuild(build string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.seen == nil {
		n.loadSeenLocked()
	}
	if n.seen[build] {
		return
	}
	n.seen[build] = true
	f, err := os.OpenFile(n.seenPath(), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		n.log.Warn("cluster: remember a shared template", "err", err)
		return
	}
	fmt.Fprintln(f, build)
	f.Close()
}

func (n *Node) seenBuild(build string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.seen == nil {
		n.loadSeenLocked()
	}
	return n.seen[build]
}

func (n *Node) seenPath() string { return filepath.Join(n.cfg.DataDir, "cluster", "templates-seen") }

func (n *Node) loadSeenLocked() {
	n.seen = map[string]bool{}
	os.MkdirAll(filepath.Dir(n.seenPath()), 0o700)
	b, _ := os.ReadFile(n.seenPath())
	for _, l := range strings.Fields(string(b)) {
		n.seen[l] = true
	}
}

// ForwardHeader marks a request one node forwards to another for a client
// (set by the forwarding node, over the client's copy): the receiving
// node serves it as a client's request, never as one of the nodes' own
// calls below. Without it, a client's request for a sandbox, which is
// forwarded with the client's path, would reach the template transfers.
const ForwardHeader = "Hutch-Cluster-Forwarded"

// PeerHandler is the handler of the node's cluster listener: requests
// another node forwarded for a client (ForwardHeader) go to forwarded,
// which serves them here, never forwarding them again; the rest are the
// nodes' own calls, the template transfers above, and nothing else.
func (n *Node) PeerHandler(forwarded http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /cluster/v1/templates/{ref}/manifest", func(w http.ResponseWriter, r *http.Request) {
		// Only what the cluster shares: not a paused sandbox's files, nor
		// a fork's.
		if t, err := n.templates.Get(r.PathValue("ref")); err != nil || !shared(t) {
			peerError(w, fmt.Errorf("template %s: %w", r.PathValue("ref"), errdefs.ErrNotFound))
			return
		}
		m, err := n.templates.Manifest(r.Context(), r.PathValue("ref"))
		if err != nil {
			peerError(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(m)
	})
	mux.HandleFunc("GET /cluster/v1/layers/{id}", func(w http.ResponseWriter, r *http.Request) {
		if !n.templates.HasLayer(r.PathValue("id")) {
			peerError(w, fmt.Errorf("layer %s: %w", r.PathValue("id"), errdefs.ErrNotFound))
			return
		}
		w.Header().Set("Content-Type", "application/x-tar")
		if err := n.templates.WriteLayer(r.Context(), r.PathValue("id"), w); err != nil {
			// Headers are gone: a cut stream fails the receiver's digest.
			n.log.Warn("cluster: send a layer", "id", r.PathValue("id"), "err", err)
			panic(http.ErrAbortHandler)
		}
	})
	mux.HandleFunc("GET /cluster/v1/signed", n.signedHandler)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(ForwardHeader) != "" {
			r.Header.Del(ForwardHeader)
			forwarded.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func peerError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	switch {
	case errdefs.IsNotFound(err):
		status = http.StatusNotFound
	case errdefs.IsInvalidArgument(err):
		status = http.StatusBadRequest
	}
	http.Error(w, err.Error(), status)
}
