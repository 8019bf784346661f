package server

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/hutch-sandbox/hutch/internal/e2bapi"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// templateAlias answers GET /templates/aliases/{alias}, the call behind the
// SDKs' Template.exists(name), as E2B's API does: 200 and the template's
// id when a create with that templateID would find it, else 404
// "template '<alias>' not found". A template's name is its alias and its
// id here; every API key may use every template, so each is public.
func (s *Server) templateAlias(w http.ResponseWriter, r *http.Request) {
	alias := r.PathValue("alias")
	t, err := s.mgr.Template(alias)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			err = e2bapi.NotFound(fmt.Sprintf("template '%s' not found", alias))
		}
		e2bapi.Write(w, s.logger, err)
		return
	}
	writeJSON(w, http.StatusOK, e2bapi.TemplateAliasResponse{Public: true, TemplateID: t.Name})
}
