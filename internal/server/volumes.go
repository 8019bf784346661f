package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/e2bapi"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/volume"
)

// volumeRoutes registers E2B's volume API (with an API key) and its volume
// content API (with a volume's own token); without a volume manager both
// answer 501.
func (s *Server) volumeRoutes() {
	s.handle("POST /volumes", s.authed(s.withVolumes(s.createVolume)))
	s.handle("GET /volumes", s.authed(s.withVolumes(s.listVolumes)))
	s.handle("GET /volumes/{volumeID}", s.authed(s.withVolumes(s.getVolume)))
	s.handle("DELETE /volumes/{volumeID}", s.authed(s.withVolumes(s.deleteVolume)))
	s.handle("GET /volumecontent/{volumeID}/dir", s.volumeContent(s.listDir))
	s.handle("POST /volumecontent/{volumeID}/dir", s.volumeContent(s.makeDir))
	s.handle("GET /volumecontent/{volumeID}/path", s.volumeContent(s.statPath))
	s.handle("PATCH /volumecontent/{volumeID}/path", s.volumeContent(s.updatePath))
	s.handle("DELETE /volumecontent/{volumeID}/path", s.volumeContent(s.removePath))
	s.handle("GET /volumecontent/{volumeID}/file", s.volumeContent(s.readFile))
	s.handle("PUT /volumecontent/{volumeID}/file", s.volumeContent(s.writeFile))
}

// withVolumes answers 501 for a server without volumes (Options.Volumes).
func (s *Server) withVolumes(h http.HandlerFunc) http.HandlerFunc {
	if s.volumes == nil {
		return s.notYet("volumes", "")
	}
	return h
}

func (s *Server) volumeJSON(v volume.Volume) e2bapi.VolumeAndToken {
	out := e2bapi.VolumeAndToken{VolumeID: v.ID, Name: v.Name, Token: v.Token}
	if s.domain != "" {
		d := s.domain
		out.Domain = &d
	}
	return out
}

func (s *Server) createVolume(w http.ResponseWriter, r *http.Request) {
	var req e2bapi.NewVolume
	if !s.decode(w, r, &req, false) {
		return
	}
	if s.cluster != nil {
		if err := s.mgr.Ready(); err != nil {
			e2bapi.Write(w, s.logger, err)
			return
		}
		// A name is unique among a key's volumes on every node.
		vols, err := s.cluster.ListVolumes(r.Context(), keyID(r))
		if err != nil {
			e2bapi.Write(w, s.logger, err)
			return
		}
		for _, v := range vols {
			if v.Name == req.Name {
				e2bapi.Write(w, s.logger, fmt.Errorf("volume %q exists already (on node %s): %w", req.Name, v.Node, errdefs.ErrAlreadyExists))
				return
			}
		}
	}
	v, err := s.volumes.Create(r.Context(), keyID(r), req.Name)
	if err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	if s.cluster != nil {
		if err := s.cluster.PutVolume(r.Context(), v.ID, v.Name, v.KeyID); err != nil {
			s.volumes.Delete(context.WithoutCancel(r.Context()), v.KeyID, v.ID)
			e2bapi.Write(w, s.logger, err)
			return
		}
	}
	writeJSON(w, http.StatusCreated, s.volumeJSON(v))
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) {
	if s.cluster != nil {
		vols, err := s.cluster.ListVolumes(r.Context(), keyID(r))
		if err != nil {
			e2bapi.Write(w, s.logger, err)
			return
		}
		out := make([]e2bapi.VolumeInfo, 0, len(vols))
		for _, v := range vols {
			out = append(out, e2bapi.VolumeInfo{VolumeID: v.ID, Name: v.Name})
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	vols, err := s.volumes.List(r.Context(), keyID(r))
	if err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	out := make([]e2bapi.VolumeInfo, 0, len(vols))
	for _, v := range vols {
		out = append(out, e2bapi.VolumeInfo{VolumeID: v.ID, Name: v.Name})
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request) {
	v, err := s.volumes.Get(r.Context(), keyID(r), r.PathValue("volumeID"))
	if err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	writeJSON(w, http.StatusOK, s.volumeJSON(v))
}

func (s *Server) deleteVolume(w http.ResponseWriter, r *http.Request) {
	if err := s.volumes.Delete(r.Context(), keyID(r), r.PathValue("volumeID")); err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	if s.cluster != nil {
		if err := s.cluster.DeleteVolume(r.Context(), r.PathValue("volumeID")); err != nil {
			s.logger.Warn("cluster: forget a deleted volume", "id", r.PathValue("volumeID"), "err", err)
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// contentHandler serves one call of the volume content API on an open
// volume; errors it returns are written by volumeContent.
type contentHandler func(w http.ResponseWriter, r *http.Request, c *volume.Content) error

// volumeContent authenticates a content API call by the volume's own
// token (Authorization: Bearer), opens the volume and runs h. Every error
// is answered once here, in E2B's shape: a path that leads out of the
// volume is a 400 that says so.
func (s *Server) volumeContent(h contentHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || token == "" {
			e2bapi.Write(w, s.logger, e2bapi.Unauthorized("missing volume token: send it as Authorization: Bearer <token>"))
			return
		}
		if s.volumes == nil {
			e2bapi.Write(w, s.logger, notSupported("volumes", ""))
			return
		}
		c, err := s.volumes.Open(r.Context(), r.PathValue("volumeID"), token)
		if errors.Is(err, volume.ErrBadToken) {
			e2bapi.Write(w, s.logger, e2bapi.Unauthorized("invalid volume token"))
			return
		}
		if err == nil {
			defer c.Close()
			// The token proved the call: it acts for the volume's key.
			auditKey(r, c.KeyID())
			err = h(w, r, c)
		}
		e2bapi.Write(w, s.logger, err)
	}
}

func volumeEntryJSON(e volume.Entry) e2bapi.VolumeEntryStat {
	return e2bapi.VolumeEntryStat{Name: e.Name, Type: string(e.Type), Path: e.Path, Size: e.Size, Mode: e.Mode,
		UID: e.UID, GID: e.GID, Atime: e2bapi.Time(e.Atime), Mtime: e2bapi.Time(e.Mtime), Ctime: e2bapi.Time(e.Ctime), Target: e.Target}
}

// pathParam is the query's path, required.
func pathParam(r *http.Request) (string, error) {
	p := r.URL.Query().Get("path")
	if p == "" {
		return "", e2bapi.BadRequest("path is required")
	}
	return p, nil
}

// ownerParams reads uid, gid and mode from the query (each optional).
func ownerParams(r *http.Request) (volume.Owner, error) {
	var o volume.Owner
	q := r.URL.Query()
	for name, dst := range map[string]**uint32{"uid": &o.UID, "gid": &o.GID, "mode": &o.Mode} {
		v := q.Get(name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return o, e2bapi.BadRequestf("%s %q is not a number", name, v)
		}
		u := uint32(n)
		*dst = &u
	}
	return o, nil
}

// boolParam reads a query flag: "true" is true, "", "false" false.
func boolParam(r *http.Request, name string) (bool, error) {
	switch v := r.URL.Query().Get(name); v {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	default:
		return false, e2bapi.BadRequestf("%s %q: want true or false", name, v)
	}
}

func (s *Server) listDir(w http.ResponseWriter, r *http.Request, c *volume.Content) error {
	p, err := pathParam(r)
	if err != nil {
		return err
	}
	depth := 1
	if v := r.URL.Query().Get("depth"); v != "" {
		if depth, err = strconv.Atoi(v); err != nil || depth < 1 {
			return e2bapi.BadRequestf("depth %q: want a positive number", v)
		}
	}
	entries, err := c.List(r.Context(), p, depth)
	if err != nil {
		return err
	}
	out := make([]e2bapi.VolumeEntryStat, 0, len(entries))
	for _, e := range entries {
		out = append(out, volumeEntryJSON(e))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) makeDir(w http.ResponseWriter, r *http.Request, c *volume.Content) error {
	p, err := pathParam(r)
	if err != nil {
		return err
	}
	o, err := ownerParams(r)
	if err != nil {
		return err
	}
	force, err := boolParam(r, "force")
	if err != nil {
		return err
	}
	e, err := c.MakeDir(p, o, force)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, volumeEntryJSON(e))
	return nil
}

func (s *Server) statPath(w http.ResponseWriter, r *http.Request, c *volume.Content) error {
	p, err := pathParam(r)
	if err != nil {
		return err
	}
	e, err := c.Stat(p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, volumeEntryJSON(e))
	return nil
}

func (s *Server) updatePath(w http.ResponseWriter, r *http.Request, c *volume.Content) error {
	p, err := pathParam(r)
	if err != nil {
		return err
	}
	var req e2bapi.VolumeMetadata
	if err := e2bapi.DecodeOptionalJSON(r, &req, maxBody); err != nil {
		return err
	}
	e, err := c.Update(p, volume.Owner{UID: req.UID, GID: req.GID, Mode: req.Mode})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, volumeEntryJSON(e))
	return nil
}

func (s *Server) removePath(w http.ResponseWriter, r *http.Request, c *volume.Content) error {
	p, err := pathParam(r)
	if err != nil {
		return err
	}
	if err := c.Remove(p); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) readFile(w http.ResponseWriter, r *http.Request, c *volume.Content) error {
	p, err := pathParam(r)
	if err != nil {
		return err
	}
	f, e, err := c.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	// ServeContent: Range and conditional requests for free; the name
	// passed only picks nothing, the type is set above.
	http.ServeContent(w, r, "", e.Mtime, f)
	return nil
}

func (s *Server) writeFile(w http.ResponseWriter, r *http.Request, c *volume.Content) error {
	p, err := pathParam(r)
	if err != nil {
		return err
	}
	o, err := ownerParams(r)
	if err != nil {
		return err
	}
	// force: E2B's SDK sends it to overwrite an existing file; writes
	// here always replace the file (as its docs say writeFile does), so
	// it is accepted and has no further effect.
	if _, err := boolParam(r, "force"); err != nil {
		return err
	}
	e, err := c.WriteFile(p, r.Body, o)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, volumeEntryJSON(e))
	return nil
}
