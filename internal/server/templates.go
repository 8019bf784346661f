package server

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/builder"
	"github.com/hutch-sandbox/hutch/internal/e2bapi"
	"github.com/hutch-sandbox/hutch/internal/envdapi"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/template"
)

// maxLogEntries is how many log lines one status answer carries at most,
// as E2B's API has it.
const maxLogEntries = 100

// uploadURLTTL is how long an upload link stays good: the SDK's own
// upload timeout is an hour.
const uploadURLTTL = time.Hour

func (s *Server) templateRoutes() {
	s.handle("GET /templates/aliases/{alias}", s.authed(s.templateAlias))
	s.handle("POST /v3/templates", s.authed(s.requestBuild))
	s.handle("GET /templates/{templateID}/files/{hash}", s.authed(s.fileUploadLink))
	s.handle("PUT /templates/files/{hash}", s.uploadFiles) // signed URL, no key
	s.handle("POST /v2/templates/{templateID}/builds/{buildID}", s.authed(s.startBuild))
	s.handle("GET /templates/{templateID}/builds/{buildID}/status", s.authed(s.buildStatus))
	s.handle("POST /templates/tags", s.authed(s.assignTags))
	s.handle("DELETE /templates/tags", s.authed(s.deleteTags))
	// GET /templates/{templateID}/tags, written so that it does not clash
	// with GET /templates/aliases/{alias} in the mux.
	s.handle("GET /templates/{templateID}/{sub}", s.authed(s.templateSub))
	s.handle("GET /templates", s.authed(s.listTemplates))
	s.handle("GET /v2/templates", s.authed(s.listTemplates))
	s.handle("GET /templates/{templateID}", s.authed(s.getTemplate))
	s.handle("DELETE /templates/{templateID}", s.authed(s.deleteTemplate))
	// The other methods of the exact paths (POST /templates and POST
	// /v2/templates are E2B's deprecated build requests): the 501 of the
	// subtrees under them (routes()), not the mux's redirect to
	// "/templates/" that a method without a route would get.
	for _, p := range []string{"/templates", "/v2/templates", "/v3/templates"} {
		s.handle(p, s.authed(s.notYet("this call of the template API", templateCallsHint)))
	}
}

// templateCallsHint ends the 501 of a template API call Hutch does not
// serve (routes() says the same of the subtrees).
const templateCallsHint = "see docs/templates.md for the template calls Hutch serves"

// templateAlias answers GET /templates/aliases/{alias}, the call behind the
// SDKs' Template.exists(name), as E2B's API does: 200 and the template's
// id when a create with that templateID would find it, 403 when it is
// another key's, else 404 "template '<alias>' not found". A template's
// name is its alias and its id here; the operator's templates are every
// key's, a key's own are its alone.
func (s *Server) templateAlias(w http.ResponseWriter, r *http.Request) {
	alias := r.PathValue("alias")
	t, err := s.mgr.Template(alias)
	if err == nil {
		// Another key's: it exists, not for this key (E2B's 403, which
		// the SDKs' Template.exists reads as true).
		err = t.MayUse(keyID(r))
	}
	if errors.Is(err, errdefs.ErrNotFound) && s.templates != nil && !strings.Contains(alias, ":") {
		// A name whose builds all have other tags than the default
		// exists too (Template.exists("name") after a build of name:v1).
		if owner, terr := s.templates.NameOwner(alias); terr == nil && owner != "" && owner != keyID(r) {
			err = fmt.Errorf("template %s belongs to another API key: %w", alias, errdefs.ErrPermissionDenied)
		} else if terr == nil {
			writeJSON(w, http.StatusOK, e2bapi.TemplateAliasResponse{Public: owner == "", TemplateID: alias})
			return
		}
	}
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			err = e2bapi.NotFound(fmt.Sprintf("template '%s' not found", alias))
		}
		e2bapi.Write(w, s.logger, err)
		return
	}
	writeJSON(w, http.StatusOK, e2bapi.TemplateAliasResponse{Public: t.Owner == "", TemplateID: t.Name})
}

// noBuilder answers when the server builds no templates (tests' servers
// without a template store).
func (s *Server) noBuilder(w http.ResponseWriter) bool {
	if s.builder == nil || s.templates == nil {
		e2bapi.Write(w, s.logger, e2bapi.NotSupported("template builds"))
		return true
	}
	return false
}

// requestBuild answers POST /v3/templates: a build of name[:tag] waits
// for its steps. The template's id is its name.
func (s *Server) requestBuild(w http.ResponseWriter, r *http.Request) {
	if s.noBuilder(w) {
		return
	}
	var req e2bapi.TemplateBuildRequestV3
	if err := e2bapi.DecodeJSON(r, &req, 1<<20); err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	ref := req.Name
	if ref == "" {
		ref = req.Alias
	}
	if ref == "" {
		e2bapi.Write(w, s.logger, e2bapi.BadRequest("name is required"))
		return
	}
	name, tag, err := template.ParseRef(ref)
	if err != nil {
		e2bapi.Write(w, s.logger, e2bapi.BadRequest(err.Error()))
		return
	}
	tags := []string{tag}
	for _, t := range req.Tags {
		if t != tag {
			tags = append(tags, t)
		}
	}
	br := builder.Request{Name: name, Tags: tags}
	if req.CPUCount != nil {
		br.CPUCount = int(*req.CPUCount)
	}
	if req.MemoryMB != nil {
		br.MemoryMB = int(*req.MemoryMB)
	}
	bd, err := s.builder.Request(keyID(r), br)
	if err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	writeJSON(w, http.StatusAccepted, e2bapi.TemplateRequestResponseV3{
		TemplateID: name, BuildID: bd.ID, Public: false, Names: []string{ref}, Tags: tags, Aliases: []string{name},
	})
}

// fileUploadLink answers GET /templates/{templateID}/files/{hash} (201,
// as E2B's API does to this GET): whether the archive of a COPY step's
// files is here, and a signed link to PUT it to when not.
func (s *Server) fileUploadLink(w http.ResponseWriter, r *http.Request) {
	if s.noBuilder(w) {
		return
	}
	hash := r.PathValue("hash")
	if !template.ValidHash(hash) {
		e2bapi.Write(w, s.logger, e2bapi.BadRequest("hash must be 64 lowercase hex digits (a SHA-256)"))
		return
	}
	if s.builder.HasFiles(keyID(r), hash) {
		writeJSON(w, http.StatusCreated, e2bapi.TemplateBuildFileUpload{Present: true})
		return
	}
	exp := time.Now().Add(uploadURLTTL).Unix()
	scheme := "http"
	if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		scheme = "https"
	}
	key := keyID(r)
	u := fmt.Sprintf("%s://%s/templates/files/%s?key=%s&expires=%d&signature=%s", scheme, r.Host, hash, url.QueryEscape(key), exp, s.uploadSignature(key, hash, exp))
	writeJSON(w, http.StatusCreated, e2bapi.TemplateBuildFileUpload{Present: false, URL: u})
}

// uploadSignature signs an upload link of API key keyID for hash valid
// until exp, with a secret made at start (links do not outlive the
// process; the SDK asks for one right before it uploads).
func (s *Server) uploadSignature(keyID, hash string, exp int64) string {
	m := hmac.New(sha256.New, s.uploadKey[:])
	fmt.Fprintf(m, "%s\x00%s\x00%d", keyID, hash, exp)
	return hex.EncodeToString(m.Sum(nil))
}

// uploadFiles answers PUT /templates/files/{hash}?key=&expires=&signature=,
// the signed link fileUploadLink handed out: the files are kept for that
// key's builds alone.
func (s *Server) uploadFiles(w http.ResponseWriter, r *http.Request) {
	if s.noBuilder(w) {
		return
	}
	hash, key := r.PathValue("hash"), r.URL.Query().Get("key")
	exp, err := strconv.ParseInt(r.URL.Query().Get("expires"), 10, 64)
	if err != nil || !template.ValidHash(hash) || key == "" || !hmac.Equal([]byte(r.URL.Query().Get("signature")), []byte(s.uploadSignature(key, hash, exp))) {
		e2bapi.Write(w, s.logger, &e2bapi.StatusError{Status: http.StatusForbidden, Message: "upload link is not valid"})
		return
	}
	// The signature proved the call: it acts for the key it names.
	auditKey(r, key)
	if time.Now().Unix() > exp {
		e2bapi.Write(w, s.logger, &e2bapi.StatusError{Status: http.StatusForbidden, Message: "upload link has expired"})
		return
	}
	if err := s.builder.PutFiles(key, hash, r.Body, r.ContentLength); err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// startBuild answers POST /v2/templates/{templateID}/builds/{buildID}
// (202): the build runs in the background.
// maxBuildBody bounds a build's steps as JSON: 512 steps of 8 KiB each.
const maxBuildBody = 4 << 20

func (s *Server) startBuild(w http.ResponseWriter, r *http.Request) {
	if s.noBuilder(w) {
		return
	}
	// The build is looked up before its body is read: a body is up to
	// maxBuildBody of JSON to decode, which only the owner of a waiting
	// build may make the server read (a hundred 16 MB bodies to builds that
	// did not exist took it to 4.8 GB, review 27 round 2, G4).
	bd, _, err := s.builder.Get(keyID(r), r.PathValue("buildID"), 0, 0)
	if err == nil && bd.Template != r.PathValue("templateID") {
		err = fmt.Errorf("build %s is not a build of template %s: %w", bd.ID, r.PathValue("templateID"), errdefs.ErrNotFound)
	}
	if err == nil && bd.Status != builder.StatusWaiting {
		err = e2bapi.BadRequest(fmt.Sprintf("build %s is %s, not waiting", bd.ID, bd.Status))
	}
	if err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	var req e2bapi.TemplateBuildStartV2
	if err := e2bapi.DecodeJSON(r, &req, maxBuildBody); err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	spec := builder.Spec{FromImage: req.FromImage, FromTemplate: req.FromTemplate, Force: req.Force, StartCmd: req.StartCmd, ReadyCmd: req.ReadyCmd}
	if reg := req.FromImageRegistry; reg != nil {
		switch reg.Type {
		case "", "registry":
			spec.Username, spec.Password = reg.Username, reg.Password
		default:
			e2bapi.Write(w, s.logger, e2bapi.BadRequestf("fromImageRegistry type %q: only \"registry\" (user name and password) is supported", reg.Type))
			return
		}
	}
	for _, st := range req.Steps {
		spec.Steps = append(spec.Steps, template.Step{Type: strings.ToUpper(st.Type), Args: st.Args, Force: st.Force, FilesHash: st.FilesHash})
	}
	if err := s.builder.Start(keyID(r), r.PathValue("buildID"), spec); err != nil {
		var be *builder.Error
		if errors.As(err, &be) || errors.Is(err, errdefs.ErrFailedPrecondition) {
			err = e2bapi.BadRequest(err.Error())
		}
		e2bapi.Write(w, s.logger, err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// buildStatus answers GET /templates/{templateID}/builds/{buildID}/status
// with the build's status and its log from logsOffset on (at most 100
// lines, fewer with limit; level drops lines below it).
func (s *Server) buildStatus(w http.ResponseWriter, r *http.Request) {
	if s.noBuilder(w) {
		return
	}
	q := r.URL.Query()
	offset, limit := 0, maxLogEntries
	for _, p := range []struct {
		name string
		v    *int
	}{{"logsOffset", &offset}, {"limit", &limit}} {
		if v := q.Get(p.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				e2bapi.Write(w, s.logger, e2bapi.BadRequestf("%s must be a whole number, not %q", p.name, v))
				return
			}
			*p.v = n
		}
	}
	limit = min(max(limit, 1), maxLogEntries)
	minLevel := levelRank(q.Get("level"))
	bd, logs, err := s.builder.Get(keyID(r), r.PathValue("buildID"), offset, limit)
	if err == nil && len(logs) == 0 && (bd.Status == builder.StatusBuilding || bd.Status == builder.StatusWaiting) {
		// Nothing new yet: wait a moment for a line or the end, so that a
		// client polling every 200 ms (the SDKs) hears of it at once.
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		s.builder.Wait(ctx, bd.ID, offset)
		cancel()
		bd, logs, err = s.builder.Get(keyID(r), r.PathValue("buildID"), offset, limit)
	}
	if err == nil && bd.Template != r.PathValue("templateID") {
		err = fmt.Errorf("build %s of template %s: %w", r.PathValue("buildID"), r.PathValue("templateID"), errdefs.ErrNotFound)
	}
	if err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	info := e2bapi.TemplateBuildInfo{TemplateID: bd.Template, BuildID: bd.ID, Status: string(bd.Status), LogEntries: []e2bapi.BuildLogEntry{}, Logs: []string{}}
	for _, l := range logs {
		if levelRank(l.Level) >= minLevel {
			info.LogEntries = append(info.LogEntries, e2bapi.BuildLogEntry{Timestamp: l.Time, Level: l.Level, Message: l.Message, Step: l.Step})
		}
	}
	if bd.Reason != nil {
		info.Reason = &e2bapi.BuildStatusReason{Message: bd.Reason.Message, Step: bd.Reason.Step, LogEntries: []e2bapi.BuildLogEntry{}}
	}
	writeJSON(w, http.StatusOK, info)
}

func levelRank(l string) int {
	switch l {
	case "info":
		return 1
	case "warn":
		return 2
	case "error":
		return 3
	}
	return 0
}

// assignTags answers POST /templates/tags: more tags of a name point at
// the build target names.
func (s *Server) assignTags(w http.ResponseWriter, r *http.Request) {
	if s.noBuilder(w) {
		return
	}
	var req e2bapi.AssignTemplateTagsRequest
	if err := e2bapi.DecodeJSON(r, &req, 1<<20); err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	if len(req.Tags) == 0 {
		e2bapi.Write(w, s.logger, e2bapi.BadRequest("tags must not be empty"))
		return
	}
	if builtinRef(w, s, req.Target) {
		return
	}
	t, err := s.templates.TagAs(keyID(r), req.Target, req.Tags...)
	if err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	writeJSON(w, http.StatusCreated, e2bapi.AssignedTemplateTags{BuildID: t.ID, Tags: req.Tags})
}

// deleteTags answers DELETE /templates/tags.
func (s *Server) deleteTags(w http.ResponseWriter, r *http.Request) {
	if s.noBuilder(w) {
		return
	}
	var req e2bapi.DeleteTemplateTagsRequest
	if err := e2bapi.DecodeJSON(r, &req, 1<<20); err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	name, _, _ := strings.Cut(req.Name, ":")
	if builtinRef(w, s, name) {
		return
	}
	if len(req.Tags) == 0 {
		e2bapi.Write(w, s.logger, e2bapi.BadRequest("tags must not be empty"))
		return
	}
	if err := s.templates.UntagAs(keyID(r), name, req.Tags...); err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// templateSub answers GET /templates/{templateID}/tags, and 404 for
// anything else under a template.
func (s *Server) templateSub(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("sub") != "tags" {
		e2bapi.Write(w, s.logger, e2bapi.NotFound("no such endpoint"))
		return
	}
	s.templateTags(w, r)
}

// templateTags answers GET /templates/{templateID}/tags.
func (s *Server) templateTags(w http.ResponseWriter, r *http.Request) {
	if s.noBuilder(w) || !s.mayRead(w, r, r.PathValue("templateID")) {
		return
	}
	tags, err := s.templates.Tags(r.PathValue("templateID"))
	if err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	out := []e2bapi.TemplateTag{}
	for _, t := range tags {
		out = append(out, e2bapi.TemplateTag{Tag: t.Tag, BuildID: t.BuildID, CreatedAt: t.Created})
	}
	writeJSON(w, http.StatusOK, out)
}

// listTemplates answers GET /templates: each name, at its default tag
// (or its first).
func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) {
	if s.noBuilder(w) {
		return
	}
	ts, err := s.templates.List()
	if err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	out := []e2bapi.Template{}
	seen := map[string]bool{}
	for _, t := range ts {
		if seen[t.Name] || t.MayUse(keyID(r)) != nil || !t.Listed() {
			continue
		}
		seen[t.Name] = true
		out = append(out, e2bapi.Template{
			TemplateID: t.Name, BuildID: t.ID, CPUCount: int32(max(t.CPUCount, 1)), MemoryMB: int32(t.MemoryMB), DiskSizeMB: int32(t.DiskSizeMB),
			Public: t.Owner == "", Aliases: []string{t.Name}, Names: []string{t.Name}, CreatedAt: t.Built, UpdatedAt: t.Built,
			BuildCount: 1, EnvdVersion: envdapi.Version, BuildStatus: string(builder.StatusReady),
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// getTemplate answers GET /templates/{templateID} with its tagged builds.
func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request) {
	if s.noBuilder(w) {
		return
	}
	name := r.PathValue("templateID")
	if !s.mayRead(w, r, name) {
		return
	}
	tags, err := s.templates.Tags(name)
	if err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	owner, _ := s.templates.NameOwner(name)
	out := e2bapi.TemplateWithBuilds{TemplateID: name, Public: owner == "", Aliases: []string{name}, Names: []string{name}, Builds: []e2bapi.TemplateBuild{}}
	seen := map[string]bool{}
	for _, tg := range tags {
		if seen[tg.BuildID] {
			continue
		}
		seen[tg.BuildID] = true
		t, err := s.templates.Get(tg.BuildID)
		if err != nil {
			continue
		}
		if out.CreatedAt.IsZero() || t.Built.Before(out.CreatedAt) {
			out.CreatedAt = t.Built
		}
		if t.Built.After(out.UpdatedAt) {
			out.UpdatedAt = t.Built
		}
		fin := t.Built
		b := e2bapi.TemplateBuild{BuildID: t.ID, Status: string(builder.StatusReady), CreatedAt: t.Built, UpdatedAt: t.Built, FinishedAt: &fin,
			CPUCount: int32(max(t.CPUCount, 1)), MemoryMB: int32(t.MemoryMB), DiskSizeMB: int32(t.DiskSizeMB), EnvdVersion: envdapi.Version}
		for _, id := range t.Layers {
			if l, err := s.templates.Layer(id); err == nil {
				b.Layers = append(b.Layers, e2bapi.TemplateLayer{ID: l.ID, SizeBytes: l.Size, Source: l.Source, CreatedAt: l.Created})
			}
		}
		out.Builds = append(out.Builds, b)
	}
	writeJSON(w, http.StatusOK, out)
}

// deleteTemplate answers DELETE /templates/{templateID} (204): the name,
// every tag and build of it, unless a sandbox uses one (409).
func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	ref := r.PathValue("templateID")
	if s.mgr.IsSnapshot(keyID(r), ref) {
		// E2B's deleteSnapshot: a sandbox made from it keeps its files.
		if err := s.mgr.DeleteSnapshot(r.Context(), keyID(r), ref); err != nil {
			e2bapi.Write(w, s.logger, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if s.noBuilder(w) {
		return
	}
	if builtinRef(w, s, ref) {
		return
	}
	if err := s.templates.RemoveAs(keyID(r), ref, s.mgr.TemplateUsers); err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// builtinRef answers 400 and reports true when ref names one of Hutch's
// own templates (base, mcp-gateway), which every key's sandboxes use and
// no API call may retag or remove.
func builtinRef(w http.ResponseWriter, s *Server, ref string) bool {
	name, _, _ := strings.Cut(ref, ":")
	if !template.Builtin(name) {
		return false
	}
	e2bapi.Write(w, s.logger, e2bapi.BadRequestf("%s is one of Hutch's own templates; it cannot be changed or removed through the API", name))
	return true
}

// mayRead answers 403 and reports false when template name belongs to
// another API key (404 when there is none).
func (s *Server) mayRead(w http.ResponseWriter, r *http.Request, name string) bool {
	owner, err := s.templates.NameOwner(name)
	if err == nil && owner != "" && owner != keyID(r) {
		err = fmt.Errorf("template %s belongs to another API key: %w", name, errdefs.ErrPermissionDenied)
	}
	if err != nil {
		e2bapi.Write(w, s.logger, err)
		return false
	}
	return true
}
