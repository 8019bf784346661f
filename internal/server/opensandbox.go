package server

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/builder"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/osbapi"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// OpenSandbox's lifecycle API (specs/sandbox-lifecycle.yml of OpenSandbox)
// under /v1, beside E2B's: the same sandboxes, keys and model, another
// wire. A sandbox made through either protocol is listed and driven
// through the other. Its in-sandbox API (execd) is served per sandbox at
// the endpoint this API hands out (opensandboxproxy.go).

// osbRoutes registers the OpenSandbox lifecycle routes.
func (s *Server) osbRoutes() {
	s.handle("POST /v1/sandboxes", s.osbAuthed(s.placed(s.osbCreate)))
	s.handle("GET /v1/sandboxes", s.osbAuthed(s.osbList))
	s.handle("GET /v1/sandboxes/{id}", s.osbAuthed(s.osbGet))
	s.handle("DELETE /v1/sandboxes/{id}", s.osbAuthed(s.osbKill))
	s.handle("POST /v1/sandboxes/{id}/renew-expiration", s.osbAuthed(s.osbRenew))
	s.handle("GET /v1/sandboxes/{id}/endpoints/{port}", s.osbAuthed(s.osbEndpoint))
	s.handle("POST /v1/sandboxes/{id}/pause", s.osbAuthed(s.osbPause))
	s.handle("POST /v1/sandboxes/{id}/resume", s.osbAuthed(s.osbResume))
	s.handle("PATCH /v1/sandboxes/{id}/metadata", s.osbAuthed(s.osbPatchMetadata))
	s.handle("POST /v1/sandboxes/{id}/snapshots", s.osbAuthed(s.osbSnapshot))
	s.handle("GET /v1/snapshots", s.osbAuthed(s.osbSnapshots))
	s.handle("GET /v1/snapshots/{snapshotId}", s.osbAuthed(s.osbGetSnapshot))
	s.handle("DELETE /v1/snapshots/{snapshotId}", s.osbAuthed(s.osbDeleteSnapshot))
	s.handle("POST /v1/metrics/events", s.osbAuthed(s.osbMetricsEvent))
	s.handle("GET /v1/sandboxes/{id}/networkpolicy", s.osbAuthed(s.osbGetPolicy))
	s.handle("PUT /v1/sandboxes/{id}/networkpolicy", s.osbAuthed(s.osbPutPolicy))
	s.handle("PATCH /v1/sandboxes/{id}/networkpolicy", s.osbAuthed(s.osbPatchPolicy))
	s.handle("DELETE /v1/sandboxes/{id}/networkpolicy", s.osbAuthed(s.osbDeletePolicyRules))
	s.handle("/v1/sandboxes/{id}/proxy/{port}/", s.osbProxy)
	// Everything else under /v1 is OpenSandbox's too: a 404 in its shape.
	s.handle("/v1/", func(w http.ResponseWriter, r *http.Request) {
		osbapi.Write(w, s.logger, osbapi.Errorf(http.StatusNotFound, "HUTCH::NOT_FOUND",
			fmt.Sprintf("%s %s is not an OpenSandbox lifecycle call Hutch serves (docs/opensandbox.md lists them)", r.Method, r.URL.Path)))
	})
}

// osbMaxBody caps the lifecycle API's request bodies.
const osbMaxBody = 1 << 20

// osbAuthed is authed for OpenSandbox's clients: the key comes in
// OPEN-SANDBOX-API-KEY (or E2B's X-API-KEY), and failures are answered in
// OpenSandbox's error shape.
func (s *Server) osbAuthed(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := cmp.Or(r.Header.Get(osbapi.HeaderAPIKey), r.Header.Get("X-API-Key"))
		if key == "" {
			osbapi.Write(w, s.logger, osbapi.Errorf(http.StatusUnauthorized, osbapi.CodeUnauthorized, "missing API key: send it in the OPEN-SANDBOX-API-KEY header"))
			return
		}
		id, err := s.mgr.VerifyKey(r.Context(), key)
		if err != nil {
			if errdefs.IsNotFound(err) {
				err = osbapi.Errorf(http.StatusUnauthorized, osbapi.CodeUnauthorized, "invalid API key")
			}
			osbapi.Write(w, s.logger, err)
			return
		}
		auditKey(r, id)
		h(w, r.WithContext(context.WithValue(r.Context(), keyCtx{}, id)))
	}
}

func (s *Server) osbCreate(w http.ResponseWriter, r *http.Request) {
	var req osbapi.CreateSandboxRequest
	if err := osbapi.DecodeJSON(r, &req, osbMaxBody, false); err != nil {
		osbapi.Write(w, s.logger, err)
		return
	}
	cr, err := osbCreateRequest(&req)
	if err != nil {
		osbapi.Write(w, s.logger, err)
		return
	}
	cr.KeyID = keyID(r)
	switch {
	case req.SnapshotID != "":
		cr.Template = req.SnapshotID
		auditNote(r, "snapshot", req.SnapshotID)
	default:
		auditNote(r, "image", req.Image.URI)
		tpl, imported, err := s.osbImage(r.Context(), keyID(r), req.Image)
		if err != nil {
			osbapi.Write(w, s.logger, err)
			return
		}
		cr.Template = tpl
		if imported {
			cr.Image = req.Image.URI
		}
	}
	if env := audit.Env(req.Env, nil); len(env) > 0 {
		auditNote(r, "envVars", env)
	}
	if len(req.Metadata) > 0 {
		auditNote(r, "metadata", req.Metadata)
	}
	if len(cr.Entrypoint) > 0 {
		auditNote(r, "entrypoint", cr.Entrypoint)
	}
	auditNote(r, "timeoutSeconds", int64(cr.Timeout/time.Second))
	policy := networkDetail(cr.Network.Internet, cr.Network.AllowOut, cr.Network.DenyOut)
	if policy != nil {
		auditNote(r, "network", policy)
	}
	sb, err := s.mgr.Create(r.Context(), cr)
	if err != nil {
		if req.SnapshotID != "" && (errdefs.IsNotFound(err) || errors.Is(err, errdefs.ErrPermissionDenied)) {
			// Another key's snapshot is answered as none at all: no
			// probing of what other keys have (review: 403 against 404).
			err = osbapi.Errorf(http.StatusNotFound, osbapi.CodeSnapshotNotFound, fmt.Sprintf("snapshot %q does not exist", req.SnapshotID))
		}
		osbapi.Write(w, s.logger, err)
		return
	}
	auditSandbox(r, sb.ID)
	if policy != nil {
		s.audit.Record(audit.Event{KeyID: keyID(r), SandboxID: sb.ID, Kind: audit.KindNetwork, Action: "network.set", Detail: policy})
	}
	full := s.osbSandbox(sb)
	w.Header().Set("Location", "/v1/sandboxes/"+sb.ID)
	osbapi.WriteJSON(w, http.StatusAccepted, osbapi.CreateSandboxResponse{ID: full.ID, Status: full.Status,
		Metadata: full.Metadata, Entrypoint: full.Entrypoint, ExpiresAt: full.ExpiresAt, CreatedAt: full.CreatedAt})
}

// osbCreateRequest checks req and turns what does not depend on the
// server's state into a CreateRequest.
func osbCreateRequest(req *osbapi.CreateSandboxRequest) (sandbox.CreateRequest, error) {
	cr := sandbox.CreateRequest{Metadata: req.Metadata, Envs: req.Env, Secure: true, Entrypoint: req.Entrypoint}
	hasImage := req.Image != nil && req.Image.URI != ""
	switch {
	case hasImage == (req.SnapshotID != ""):
		return cr, osbapi.BadRequest("give exactly one of image.uri and snapshotId")
	case len(req.Volumes) > 0:
		return cr, osbapi.BadRequest("volumes: OpenSandbox's host, pvc and ossfs volumes are not served by Hutch; mount Hutch volumes through its E2B API (docs/volumes.md)")
	case req.Lifecycle != nil:
		return cr, osbapi.BadRequest("lifecycle hooks (preStart, periodic) are not served by Hutch")
	case req.CredentialProxy != nil && req.CredentialProxy.Enabled:
		return cr, osbapi.BadRequest("credentialProxy: the credential vault is not served by Hutch")
	case req.Extensions["poolRef"] != "":
		return cr, osbapi.BadRequest("extensions.poolRef: Hutch has no pools by name; it keeps warm sandboxes of its own")
	}
	if p := req.Platform; p != nil && (p.OS != "linux" || p.Arch != runtime.GOARCH) {
		return cr, osbapi.BadRequest(fmt.Sprintf("platform %s/%s: this server runs linux/%s only", p.OS, p.Arch, runtime.GOARCH))
	}
	timeout := int64(osbapi.MaxTimeout)
	if req.Timeout != nil {
		timeout = *req.Timeout
	}
	if timeout < osbapi.MinTimeout || timeout > osbapi.MaxTimeout {
		return cr, osbapi.BadRequest(fmt.Sprintf("timeout: want %d to %d seconds, got %d", osbapi.MinTimeout, osbapi.MaxTimeout, timeout))
	}
	cr.Timeout = time.Duration(timeout) * time.Second
	for k, v := range req.ResourceLimits {
		var err error
		switch k {
		case "cpu":
			cr.Resources.CPUMillis, err = osbapi.ParseCPU(v)
		case "memory":
			cr.Resources.MemoryMB, err = osbapi.ParseMemory(v)
		case "gpu", "nvidia.com/gpu":
			if v != "0" {
				err = fmt.Errorf("%s %q: this server has no GPUs to give", k, v)
			}
		default:
			err = fmt.Errorf("%q is not a resource Hutch limits (cpu, memory)", k)
		}
		if err != nil {
			return cr, osbapi.BadRequest("resourceLimits: " + err.Error())
		}
	}
	for k := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return cr, osbapi.BadRequest(fmt.Sprintf("env: %q is not a variable name (empty, or with '=' or NUL)", k))
		}
	}
	for k := range req.Metadata {
		if strings.HasPrefix(k, "opensandbox.io/") {
			return cr, osbapi.BadRequest(fmt.Sprintf("metadata key %q: the opensandbox.io/ prefix is reserved", k))
		}
	}
	if rt, ok := req.Metadata[RuntimeMetadata]; ok {
		// As through E2B's API: the metadata key picks the backend, and
		// is not the creator's metadata.
		cr.Runtime = rt
		cr.Metadata = maps.Clone(req.Metadata)
		delete(cr.Metadata, RuntimeMetadata)
	}
	if np := req.NetworkPolicy; np != nil {
		n, err := osbNetwork(np)
		if err != nil {
			return cr, err
		}
		cr.Network = n
	}
	return cr, nil
}

// osbNetwork maps an OpenSandbox egress policy onto Hutch's: allow rules
// become allowOut, deny rules denyOut, and a deny default denies every
// address allowOut does not name. Hutch's allowOut wins over its denyOut
// whatever their order, where OpenSandbox takes the first rule that
// matches: the two differ only for a deny rule written before an allow
// rule that names a narrower target (docs/opensandbox.md).
func osbNetwork(np *osbapi.NetworkPolicy) (sandbox.Network, error) {
	var n sandbox.Network
	for i, rule := range np.Egress {
		switch rule.Action {
		case "allow":
			n.AllowOut = append(n.AllowOut, rule.Target)
		case "deny":
			n.DenyOut = append(n.DenyOut, rule.Target)
		default:
			return n, osbapi.BadRequest(fmt.Sprintf("networkPolicy.egress[%d].action: want allow or deny, got %q", i, rule.Action))
		}
	}
	// A deny default joins the deny rules, which it makes redundant but
	// does not drop: the policy answered (osbPolicy) is the one given.
	denyAll := func() {
		if !slices.Contains(n.DenyOut, "0.0.0.0/0") {
			n.DenyOut = append(n.DenyOut, "0.0.0.0/0")
		}
	}
	switch np.DefaultAction {
	case "allow":
	case "deny":
		denyAll()
	case "":
		// The spec: an empty policy allows everything; rules without a
		// default deny the rest.
		if len(np.Egress) > 0 {
			denyAll()
		}
	default:
		return n, osbapi.BadRequest(fmt.Sprintf("networkPolicy.defaultAction: want allow or deny, got %q", np.DefaultAction))
	}
	return n, nil
}

// osbImage resolves an image spec to a template: one of the key's
// templates by that name (or name:tag), else the image imported from its
// registry as a template of the key's own, named after the reference. An
// import happens once per key and reference; later creates reuse it.
func (s *Server) osbImage(ctx context.Context, keyID string, img *osbapi.ImageSpec) (tpl string, imported bool, _ error) {
	if t, err := s.mgr.Template(img.URI); err == nil && t.MayUse(keyID) == nil && t.Snapshot == nil {
		return img.URI, false, nil
	}
	if _, err := name.ParseReference(img.URI); err != nil {
		return "", false, osbapi.Errorf(http.StatusBadRequest, osbapi.CodeImagePull,
			fmt.Sprintf("image %q: no template of that name, and not an image reference: %v", img.URI, err))
	}
	spec := builder.Spec{FromImage: img.URI}
	if a := img.Auth; a != nil {
		spec.Username, spec.Password = a.Username, a.Password
	}
	tplName, err := s.importImage(ctx, keyID, spec)
	switch {
	case err == nil:
		return tplName, true, nil
	case errors.Is(err, errNoImports):
		return "", false, osbapi.Errorf(http.StatusBadRequest, osbapi.CodeImagePull,
			fmt.Sprintf("image %q: no template of that name, and %v", img.URI, err))
	case errors.Is(err, errdefs.ErrResourceExhausted), ctx.Err() != nil:
		return "", false, err
	default:
		return "", false, osbapi.Errorf(http.StatusBadRequest, osbapi.CodeImagePull,
			fmt.Sprintf("image %q: not a template of this key's, and it could not be imported: %v", img.URI, err))
	}
}

// errNoImports: the server has no template store to import images into.
var errNoImports = errors.New("this server imports no images (no template store)")

// importImage imports spec.FromImage from its registry as a template of
// the key's own, named after the reference (imageTemplateName), and
// returns its name. An import happens once per key and reference: later
// calls find the template (its layers are the store's, shared by every
// key and pulled once per host). Concurrent calls for one image wait for
// the one importing it.
func (s *Server) importImage(ctx context.Context, keyID string, spec builder.Spec) (string, error) {
	if s.builder == nil || s.templates == nil {
		return "", errNoImports
	}
	tplName := imageTemplateName(keyID, spec.FromImage)
	for {
		if t, err := s.templates.Get(tplName); err == nil && t.MayUse(keyID) == nil {
			return tplName, nil
		}
		_, err := s.builder.Run(ctx, keyID, builder.Request{Name: tplName}, spec, nil)
		switch {
		case err == nil:
			return tplName, nil
		case errors.Is(err, errdefs.ErrAlreadyExists):
			// Another create imports it now: wait for that one.
			select {
			case <-ctx.Done():
				return "", ctx.Err()
			case <-time.After(250 * time.Millisecond):
			}
		default:
			// The caller's answer must not name the host's store (review
			// 31, F6): its path goes, the error's class stays.
			return "", &redacted{msg: strings.ReplaceAll(err.Error(), s.templates.Dir(), "(template store)"), err: err}
		}
	}
}

// imageTemplateName is the template an image reference is imported as for
// a key: the key's own (another key's import is not its to use), named so
// a listing of templates says what it is.
func imageTemplateName(keyID, ref string) string {
	sum := sha256.Sum256([]byte(keyID + "\x00" + ref))
	return "image-" + hex.EncodeToString(sum[:8])
}

// osbSandbox is sb as OpenSandbox's API describes it.
func (s *Server) osbSandbox(sb *sandbox.Sandbox) osbapi.Sandbox {
	out := osbapi.Sandbox{ID: sb.ID, Metadata: withRuntime(sb), Entrypoint: sb.Entrypoint, CreatedAt: sb.StartedAt}
	if out.Entrypoint == nil {
		out.Entrypoint = []string{}
	}
	switch {
	case sb.Image != "":
		out.Image = &osbapi.ImageSpec{URI: sb.Image}
	case s.mgr.IsSnapshot(sb.KeyID, sb.Alias):
		out.SnapshotID = sb.Alias
	default:
		out.Image = &osbapi.ImageSpec{URI: sb.Alias}
	}
	state := osbapi.StateRunning
	if sb.State == sandbox.StatePaused {
		state = osbapi.StatePaused
	}
	out.Status = osbapi.SandboxStatus{State: state}
	// A paused sandbox does not expire: the end its record keeps is the
	// one it had, which a resume replaces.
	if !sb.EndAt.IsZero() && state != osbapi.StatePaused {
		end := sb.EndAt.UTC()
		out.ExpiresAt = &end
	}
	return out
}

func (s *Server) osbGet(w http.ResponseWriter, r *http.Request) {
	sb, err := s.mgr.Get(r.Context(), keyID(r), r.PathValue("id"))
	if err != nil {
		s.osbFail(w, r.PathValue("id"), err)
		return
	}
	osbapi.WriteJSON(w, http.StatusOK, s.osbSandbox(sb))
}

func (s *Server) osbKill(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	auditSandbox(r, id)
	if err := s.mgr.Kill(r.Context(), keyID(r), id); err != nil {
		s.osbFail(w, r.PathValue("id"), err)
		return
	}
	s.forgetExecd(id)
	w.WriteHeader(http.StatusNoContent)
}

// osbMaxPageSize bounds a list's page.
const osbMaxPageSize = 200

func (s *Server) osbList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	page, size, err := osbPage(q)
	if err != nil {
		osbapi.Write(w, s.logger, err)
		return
	}
	f := sandbox.ListFilter{KeyID: keyID(r)}
	if m := q.Get("metadata"); m != "" {
		md, err := url.ParseQuery(m)
		if err != nil {
			osbapi.Write(w, s.logger, osbapi.BadRequest("metadata: want key=value pairs joined by &, URL-encoded: "+err.Error()))
			return
		}
		f.Metadata = map[string]string{}
		for k, v := range md {
			f.Metadata[k] = v[len(v)-1]
		}
	}
	states := q["state"]
	for _, st := range states {
		switch strings.ToLower(st) {
		case "running":
			f.States = append(f.States, sandbox.StateRunning)
		case "paused":
			f.States = append(f.States, sandbox.StatePaused)
		}
	}
	items := []osbapi.Sandbox{}
	if len(states) == 0 || len(f.States) > 0 {
		// States Hutch never reports (Pending, Terminated, ...) match
		// nothing; the key's sandboxes are few (its caps), so the page
		// is cut from them all, as the totals need.
		for {
			sbs, next, err := s.mgr.List(r.Context(), f)
			if err != nil {
				osbapi.Write(w, s.logger, err)
				return
			}
			for _, sb := range sbs {
				items = append(items, s.osbSandbox(sb))
			}
			if next == "" {
				break
			}
			f.NextToken = next
		}
	}
	total := len(items)
	from := min((page-1)*size, total)
	to := min(from+size, total)
	osbapi.WriteJSON(w, http.StatusOK, osbapi.ListSandboxesResponse{Items: items[from:to], Pagination: osbPagination(page, size, total)})
}

// osbPage reads a list's page and pageSize (1 and 20 by default).
func osbPage(q url.Values) (page, size int, _ error) {
	page, size = 1, 20
	for _, p := range []struct {
		name string
		to   *int
		most int
	}{{"page", &page, 1 << 30}, {"pageSize", &size, osbMaxPageSize}} {
		v := q.Get(p.name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > p.most {
			return 0, 0, osbapi.BadRequest(fmt.Sprintf("%s: want a whole number from 1 to %d, got %q", p.name, p.most, v))
		}
		*p.to = n
	}
	return page, size, nil
}

func osbPagination(page, size, total int) osbapi.PaginationInfo {
	pages := (total + size - 1) / size
	return osbapi.PaginationInfo{Page: page, PageSize: size, TotalItems: total, TotalPages: pages, HasNextPage: page < pages}
}

func (s *Server) osbRenew(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	auditSandbox(r, id)
	var req osbapi.RenewSandboxExpirationRequest
	if err := osbapi.DecodeJSON(r, &req, osbMaxBody, false); err != nil {
		s.osbFail(w, r.PathValue("id"), err)
		return
	}
	sb, err := s.mgr.Get(r.Context(), keyID(r), id)
	if err != nil {
		s.osbFail(w, r.PathValue("id"), err)
		return
	}
	now := time.Now()
	d := req.ExpiresAt.Sub(now)
	switch {
	case sb.State == sandbox.StatePaused:
		err = osbapi.Errorf(http.StatusConflict, osbapi.CodeInvalidState, fmt.Sprintf("sandbox %s is paused and does not expire; resume it, then renew", sb.ID))
	case req.ExpiresAt.IsZero():
		err = osbapi.BadRequest("expiresAt: want an RFC 3339 time")
	case d <= 0:
		err = osbapi.Errorf(http.StatusBadRequest, "HUTCH::INVALID_EXPIRATION", "expiresAt must be in the future")
	case !req.ExpiresAt.After(sb.EndAt):
		err = osbapi.Errorf(http.StatusBadRequest, "HUTCH::EXPIRATION_NOT_EXTENDED",
			fmt.Sprintf("expiresAt %s is not after the sandbox's current expiry %s", req.ExpiresAt.UTC().Format(time.RFC3339), sb.EndAt.UTC().Format(time.RFC3339)))
	case d > osbapi.MaxTimeout*time.Second:
		err = osbapi.Errorf(http.StatusBadRequest, "HUTCH::INVALID_EXPIRATION", fmt.Sprintf("expiresAt is at most %d seconds from now", osbapi.MaxTimeout))
	}
	if err == nil {
		auditNote(r, "timeoutSeconds", int64(d/time.Second))
		err = s.mgr.SetTimeout(r.Context(), keyID(r), id, d)
	}
	if err != nil {
		s.osbFail(w, r.PathValue("id"), err)
		return
	}
	osbapi.WriteJSON(w, http.StatusOK, osbapi.RenewSandboxExpirationResponse{ExpiresAt: now.Add(d).UTC()})
}

func (s *Server) osbEndpoint(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || !sandbox.ValidPort(port) {
		osbapi.Write(w, s.logger, osbapi.BadRequest(fmt.Sprintf("port: want 1-65535, got %q", r.PathValue("port"))))
		return
	}
	if r.URL.Query().Get("expires") != "" {
		osbapi.Write(w, s.logger, osbapi.Errorf(http.StatusNotImplemented, osbapi.CodeNotSupported,
			"signed endpoints (expires) are not served by Hutch: the endpoint's headers carry the sandbox's token instead"))
		return
	}
	sb, err := s.mgr.Get(r.Context(), keyID(r), id)
	if err != nil {
		s.osbFail(w, r.PathValue("id"), err)
		return
	}
	ep := osbapi.Endpoint{Endpoint: r.Host + osbProxyPrefix(id, port), Headers: map[string]string{}}
	// No egress sidecar runs in a Hutch sandbox: the SDKs then send
	// their policy calls to /networkpolicy (osbGetPolicy and the rest).
	w.Header().Set(osbapi.HeaderOrigin, osbapi.OriginTemplate)
	switch {
	case port == osbapi.ExecdPort:
		if sb.EnvdAccessToken != "" {
			ep.Headers[osbapi.HeaderExecdToken] = sb.EnvdAccessToken
		}
	case sb.TrafficAccessToken != "":
		ep.Headers[trafficTokenHeader] = sb.TrafficAccessToken
	}
	osbapi.WriteJSON(w, http.StatusOK, ep)
}

// osbProxyPrefix is the path under which a sandbox's port is served to
// OpenSandbox's clients.
func osbProxyPrefix(id string, port int) string {
	return "/v1/sandboxes/" + id + "/proxy/" + strconv.Itoa(port)
}

func (s *Server) osbPause(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	auditSandbox(r, id)
	if err := s.mgr.Pause(r.Context(), keyID(r), id, true); err != nil {
		s.osbFail(w, r.PathValue("id"), err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

func (s *Server) osbResume(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	auditSandbox(r, id)
	sb, err := s.mgr.Get(r.Context(), keyID(r), id)
	if err == nil && sb.State != sandbox.StatePaused {
		err = osbapi.Errorf(http.StatusConflict, osbapi.CodeInvalidState, fmt.Sprintf("sandbox %s is not paused", id))
	}
	if err == nil {
		// The life it had left when it was paused is not kept: a resumed
		// sandbox gets the default, as through E2B's API.
		_, _, err = s.mgr.Connect(r.Context(), keyID(r), id, sandbox.DefaultTimeout)
	}
	if err != nil {
		s.osbFail(w, r.PathValue("id"), err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// osbLabelValue reports whether v is a valid metadata value: Kubernetes' label
// value rules, which OpenSandbox applies to keys' last part too.
func osbLabelValue(v string) bool {
	if v == "" {
		return true
	}
	if len(v) > 63 || !isAlnum(v[0]) || !isAlnum(v[len(v)-1]) {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

func (s *Server) osbPatchMetadata(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	auditSandbox(r, id)
	var patch map[string]*string
	if err := osbapi.DecodeJSON(r, &patch, osbMaxBody, false); err != nil {
		s.osbFail(w, r.PathValue("id"), err)
		return
	}
	for _, k := range slices.Sorted(maps.Keys(patch)) {
		if strings.HasPrefix(k, "opensandbox.io/") || k == RuntimeMetadata {
			osbapi.Write(w, s.logger, osbapi.BadRequest(fmt.Sprintf("metadata key %q is reserved", k)))
			return
		}
		if _, name, _ := strings.Cut(k, "/"); k == "" || !osbLabelValue(cmp.Or(name, k)) || len(k) > 253 {
			osbapi.Write(w, s.logger, osbapi.Errorf(http.StatusBadRequest, "SANDBOX::INVALID_METADATA_LABEL", fmt.Sprintf("metadata key %q is not a valid label key", k)))
			return
		}
		if v := patch[k]; v != nil && !osbLabelValue(*v) {
			osbapi.Write(w, s.logger, osbapi.Errorf(http.StatusBadRequest, "SANDBOX::INVALID_METADATA_LABEL",
				fmt.Sprintf("metadata value %q of %q: at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit", *v, k)))
			return
		}
	}
	auditNote(r, "metadata", patch)
	sb, err := s.mgr.PatchMetadata(r.Context(), keyID(r), id, patch)
	if err != nil {
		s.osbFail(w, r.PathValue("id"), err)
		return
	}
	osbapi.WriteJSON(w, http.StatusOK, s.osbSandbox(sb))
}

func (s *Server) osbSnapshot(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	auditSandbox(r, id)
	var req osbapi.CreateSnapshotRequest
	if err := osbapi.DecodeJSON(r, &req, osbMaxBody, true); err != nil {
		s.osbFail(w, r.PathValue("id"), err)
		return
	}
	snap, err := s.mgr.CreateSnapshot(r.Context(), keyID(r), id, sandbox.SnapshotRequest{Name: req.Name})
	if err != nil {
		s.osbFail(w, r.PathValue("id"), err)
		return
	}
	w.Header().Set("Location", "/v1/snapshots/"+snap.ID)
	osbapi.WriteJSON(w, http.StatusAccepted, osbSnapshot(snap))
}

// osbSnapshot is snap as OpenSandbox describes a snapshot: Hutch's are
// ready when their create returns.
func osbSnapshot(snap *sandbox.Snapshot) osbapi.Snapshot {
	return osbapi.Snapshot{ID: snap.ID, SandboxID: snap.Sandbox, Name: snap.Name,
		Status: osbapi.SnapshotStatus{State: "Ready"}, CreatedAt: snap.Created.UTC()}
}

// osbAllSnapshots is every snapshot of f.
func (s *Server) osbAllSnapshots(ctx context.Context, f sandbox.SnapshotFilter) ([]*sandbox.Snapshot, error) {
	var all []*sandbox.Snapshot
	for {
		page, next, err := s.mgr.ListSnapshots(ctx, f)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if next == "" {
			return all, nil
		}
		f.NextToken = next
	}
}

func (s *Server) osbSnapshots(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	page, size, err := osbPage(q)
	if err != nil {
		osbapi.Write(w, s.logger, err)
		return
	}
	items := []osbapi.Snapshot{}
	if st := q["state"]; len(st) == 0 || slices.Contains(st, "Ready") {
		snaps, err := s.osbAllSnapshots(r.Context(), sandbox.SnapshotFilter{KeyID: keyID(r), Sandbox: q.Get("sandboxId"), Name: q.Get("name")})
		if err != nil {
			osbapi.Write(w, s.logger, err)
			return
		}
		for _, snap := range snaps {
			items = append(items, osbSnapshot(snap))
		}
	}
	total := len(items)
	from := min((page-1)*size, total)
	to := min(from+size, total)
	osbapi.WriteJSON(w, http.StatusOK, osbapi.ListSnapshotsResponse{Items: items[from:to], Pagination: osbPagination(page, size, total)})
}

func (s *Server) osbGetSnapshot(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("snapshotId")
	snaps, err := s.osbAllSnapshots(r.Context(), sandbox.SnapshotFilter{KeyID: keyID(r)})
	if err != nil {
		osbapi.Write(w, s.logger, err)
		return
	}
	for _, snap := range snaps {
		if snap.ID == id {
			osbapi.WriteJSON(w, http.StatusOK, osbSnapshot(snap))
			return
		}
	}
	osbapi.Write(w, s.logger, osbapi.Errorf(http.StatusNotFound, osbapi.CodeSnapshotNotFound, fmt.Sprintf("snapshot %q does not exist", id)))
}

func (s *Server) osbDeleteSnapshot(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("snapshotId")
	if err := s.mgr.DeleteSnapshot(r.Context(), keyID(r), id); err != nil {
		// An id no snapshot can have names none, as for GET (the spec's
		// delete has no 400).
		if errdefs.IsNotFound(err) || errors.Is(err, errdefs.ErrInvalidArgument) {
			err = osbapi.Errorf(http.StatusNotFound, osbapi.CodeSnapshotNotFound, fmt.Sprintf("snapshot %q does not exist", id))
		}
		osbapi.Write(w, s.logger, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// osbMetricsEvent takes the SDKs' create-latency reports, and keeps
// nothing of them: Hutch measures creates itself (docs/metrics.md).
func (s *Server) osbMetricsEvent(w http.ResponseWriter, r *http.Request) {
	var ev map[string]any
	if err := osbapi.DecodeJSON(r, &ev, 64<<10, false); err != nil {
		osbapi.Write(w, s.logger, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// osbFail answers err of a call on sandbox id: not found says which
// sandbox, in the spec's words.
func (s *Server) osbFail(w http.ResponseWriter, id string, err error) {
	var se *osbapi.StatusError
	if errdefs.IsNotFound(err) && !errors.As(err, &se) {
		err = osbapi.Errorf(http.StatusNotFound, osbapi.CodeNotFound, fmt.Sprintf("sandbox %s does not exist (or is another API key's)", id))
	}
	osbapi.Write(w, s.logger, err)
}

// osbPolicy is sb's egress policy in OpenSandbox's terms (osbNetwork's
// inverse): a deny default where every address is denied but allowOut.
func osbPolicy(n sandbox.Network) *osbapi.NetworkPolicy {
	p := &osbapi.NetworkPolicy{DefaultAction: "allow", Egress: []osbapi.NetworkRule{}}
	for _, t := range n.AllowOut {
		p.Egress = append(p.Egress, osbapi.NetworkRule{Action: "allow", Target: t})
	}
	for _, t := range n.DenyOut {
		if t == "0.0.0.0/0" {
			p.DefaultAction = "deny"
			continue
		}
		p.Egress = append(p.Egress, osbapi.NetworkRule{Action: "deny", Target: t})
	}
	if n.Internet != nil && !*n.Internet {
		p.DefaultAction, p.Egress = "deny", []osbapi.NetworkRule{}
	}
	return p
}

// osbPolicyAnswer answers the policy in force.
func (s *Server) osbPolicyAnswer(w http.ResponseWriter, p *osbapi.NetworkPolicy) {
	mode := "allow_all"
	switch {
	case p.DefaultAction == "deny" && len(p.Egress) == 0:
		mode = "deny_all"
	case len(p.Egress) > 0:
		mode = "rules"
	}
	osbapi.WriteJSON(w, http.StatusOK, osbapi.PolicyStatusResponse{Status: "ok", Mode: mode, Policy: p})
}

func (s *Server) osbGetPolicy(w http.ResponseWriter, r *http.Request) {
	sb, err := s.mgr.Get(r.Context(), keyID(r), r.PathValue("id"))
	if err != nil {
		s.osbFail(w, r.PathValue("id"), err)
		return
	}
	s.osbPolicyAnswer(w, osbPolicy(sb.Network))
}

// osbSetPolicy makes p sandbox id's egress policy and answers it.
func (s *Server) osbSetPolicy(w http.ResponseWriter, r *http.Request, p *osbapi.NetworkPolicy) {
	id := r.PathValue("id")
	auditSandbox(r, id)
	n, err := osbNetwork(p)
	if err == nil {
		auditNote(r, "network", networkDetail(n.Internet, n.AllowOut, n.DenyOut))
		err = s.mgr.UpdateEgress(r.Context(), keyID(r), id, sandbox.EgressUpdate{AllowOut: n.AllowOut, DenyOut: n.DenyOut})
	}
	if err != nil {
		s.osbFail(w, id, err)
		return
	}
	s.osbPolicyAnswer(w, osbPolicy(n))
}

func (s *Server) osbPutPolicy(w http.ResponseWriter, r *http.Request) {
	var p osbapi.NetworkPolicy
	if err := osbapi.DecodeJSON(r, &p, osbMaxBody, false); err != nil {
		osbapi.Write(w, s.logger, err)
		return
	}
	s.osbSetPolicy(w, r, &p)
}

// osbPatchPolicy merges rules into the policy: a rule replaces the one of
// its target, the first of a target in the patch wins, the default stays.
func (s *Server) osbPatchPolicy(w http.ResponseWriter, r *http.Request) {
	var rules []osbapi.NetworkRule
	if err := osbapi.DecodeJSON(r, &rules, osbMaxBody, false); err != nil {
		osbapi.Write(w, s.logger, err)
		return
	}
	s.osbEditPolicy(w, r, func(p *osbapi.NetworkPolicy) {
		seen := map[string]bool{}
		var patch []osbapi.NetworkRule
		for _, rule := range rules {
			if !seen[rule.Target] {
				seen[rule.Target] = true
				patch = append(patch, rule)
			}
		}
		kept := slices.DeleteFunc(p.Egress, func(rule osbapi.NetworkRule) bool { return seen[rule.Target] })
		p.Egress = append(patch, kept...)
	})
}

// osbDeletePolicyRules removes the rules of the targets the body lists;
// targets without a rule are ignored.
func (s *Server) osbDeletePolicyRules(w http.ResponseWriter, r *http.Request) {
	var targets []string
	if err := osbapi.DecodeJSON(r, &targets, osbMaxBody, false); err != nil {
		osbapi.Write(w, s.logger, err)
		return
	}
	s.osbEditPolicy(w, r, func(p *osbapi.NetworkPolicy) {
		p.Egress = slices.DeleteFunc(p.Egress, func(rule osbapi.NetworkRule) bool { return slices.Contains(targets, rule.Target) })
	})
}

// osbEditPolicy changes sandbox id's policy with edit.
func (s *Server) osbEditPolicy(w http.ResponseWriter, r *http.Request, edit func(*osbapi.NetworkPolicy)) {
	sb, err := s.mgr.Get(r.Context(), keyID(r), r.PathValue("id"))
	if err != nil {
		s.osbFail(w, r.PathValue("id"), err)
		return
	}
	p := osbPolicy(sb.Network)
	edit(p)
	s.osbSetPolicy(w, r, p)
}

// redacted is err with another message (the host's paths taken out), its
// class kept for errors.Is.
type redacted struct {
	msg string
	err error
}

func (r *redacted) Error() string { return r.msg }
func (r *redacted) Unwrap() error { return r.err }
