package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/hutch-sandbox/hutch/internal/e2bapi"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// snapshotRoutes serves E2B's snapshot and fork calls and the deprecated
// resume.
func (s *Server) snapshotRoutes() {
	s.handle("POST /sandboxes/{id}/snapshots", s.authed(s.createSnapshot))
	s.handle("GET /snapshots", s.authed(s.listSnapshots))
	s.handle("POST /sandboxes/{id}/fork", s.authed(s.fork))
	s.handle("POST /sandboxes/{id}/resume", s.authed(s.resume))
}

// createSnapshot answers POST /sandboxes/{id}/snapshots: 201 with the
// snapshot's id and names, 404 for an unknown sandbox.
func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req e2bapi.SnapshotRequest
	if !s.decode(w, r, &req, true) {
		return
	}
	sr := sandbox.SnapshotRequest{}
	if req.Name != nil {
		sr.Name = *req.Name
	}
	if req.TTL != nil {
		sr.TTL = time.Duration(*req.TTL) * time.Second
	}
	snap, err := s.mgr.CreateSnapshot(r.Context(), keyID(r), id, sr)
	if err != nil {
		s.notFound(w, id, err)
		return
	}
	writeJSON(w, http.StatusCreated, snapshotJSON(snap))
}

func snapshotJSON(snap *sandbox.Snapshot) e2bapi.SnapshotInfo {
	names := snap.Refs
	if names == nil {
		names = []string{}
	}
	return e2bapi.SnapshotInfo{SnapshotID: snap.ID, Names: names}
}

// listSnapshots answers GET /snapshots?sandboxID=&name=&limit=&nextToken=.
func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := sandbox.SnapshotFilter{KeyID: keyID(r), Sandbox: q.Get("sandboxID"), Name: q.Get("name"), NextToken: q.Get("nextToken")}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 100 {
			e2bapi.Write(w, s.logger, e2bapi.BadRequest("limit must be a whole number from 1 to 100"))
			return
		}
		f.Limit = n
	}
	page, next, err := s.mgr.ListSnapshots(r.Context(), f)
	if err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	out := make([]e2bapi.SnapshotInfo, 0, len(page))
	for _, snap := range page {
		out = append(out, snapshotJSON(snap))
	}
	if next != "" {
		w.Header().Set(e2bapi.HeaderNextToken, next)
	}
	writeJSON(w, http.StatusOK, out)
}

// fork answers POST /sandboxes/{id}/fork: 201 with one item per fork, its
// sandbox or its error; 404 for an unknown sandbox, 400 for a count
// outside 1..100.
func (s *Server) fork(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req e2bapi.ForkRequest
	if !s.decode(w, r, &req, true) {
		return
	}
	results, err := s.mgr.Fork(r.Context(), keyID(r), id, req.CountOrDefault(), time.Duration(req.TimeoutSeconds())*time.Second)
	if err != nil {
		s.notFound(w, id, err)
		return
	}
	out := make([]e2bapi.ForkResult, len(results))
	for i, res := range results {
		if res.Err != nil {
			out[i].Error = e2bapi.ErrorOf(res.Err)
			continue
		}
		sb := s.sandboxJSON(res.Sandbox)
		out[i].Sandbox = &sb
	}
	writeJSON(w, http.StatusCreated, out)
}

// resume answers the deprecated POST /sandboxes/{id}/resume: 201 with the
// resumed sandbox, 409 when it is not paused, 404 when unknown.
func (s *Server) resume(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req e2bapi.ResumeRequest
	if !s.decode(w, r, &req, true) {
		return
	}
	connect := s.mgr.Connect
	if req.Memory != nil && !*req.Memory {
		connect = s.mgr.ConnectReboot
	}
	sb, err := s.mgr.Get(r.Context(), keyID(r), id)
	if err != nil {
		s.notFound(w, id, err)
		return
	}
	if sb.State != sandbox.StatePaused {
		e2bapi.Write(w, s.logger, e2bapi.Conflict("sandbox "+id+" is already running"))
		return
	}
	sb, _, err = connect(r.Context(), keyID(r), id, time.Duration(req.TimeoutSeconds())*time.Second)
	if err != nil {
		s.notFound(w, id, err)
		return
	}
	writeJSON(w, http.StatusCreated, s.sandboxJSON(sb))
}
