package osbexecd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// maxQueryValues bounds how many values one repeated query parameter
// (?path=a&path=b) may carry.
const maxQueryValues = 1000

// decodeJSON reads r's body, at most h.opts.MaxBodyBytes, into v. An empty
// body is an error unless allowEmpty, which leaves v as it is.
func (h *Handler) decodeJSON(w http.ResponseWriter, r *http.Request, v any, allowEmpty bool) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return badRequest("reading the request body: %v", err)
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		if allowEmpty {
			return nil
		}
		return badRequest("the request body is empty; a JSON body is required")
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	if err := dec.Decode(v); err != nil {
		return badRequest("error parsing request, invalid JSON body: %v", err)
	}
	if dec.More() {
		return badRequest("error parsing request: the body has data after its JSON value")
	}
	return nil
}

// queryPaths returns the values of the repeated query parameter "path",
// which must be present, non-empty and not too many.
func queryPaths(r *http.Request) ([]string, error) {
	paths := r.URL.Query()["path"]
	if len(paths) == 0 {
		return nil, missingQuery("path")
	}
	if len(paths) > maxQueryValues {
		return nil, badRequest("at most %d path parameters are allowed, got %d", maxQueryValues, len(paths))
	}
	for _, p := range paths {
		if err := checkPath(p); err != nil {
			return nil, err
		}
	}
	return paths, nil
}

// checkPath refuses a path no file can have. Paths are otherwise envd's to
// interpret: absolute inside the sandbox, relative to the user's home.
func checkPath(p string) error {
	switch {
	case p == "":
		return badRequest("a path is empty")
	case strings.ContainsRune(p, 0):
		return badRequest("path %q contains a NUL byte", p)
	case len(p) > 4096:
		return badRequest("a path is longer than 4096 bytes")
	}
	return nil
}

// timestamp is execd's event time: Unix milliseconds.
func timestamp() int64 { return time.Now().UnixMilli() }

// okEmpty answers 200 with no body, as execd's success without data.
func okEmpty(w http.ResponseWriter) { w.WriteHeader(http.StatusOK) }

// writeJSON answers 200 with v.
func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		fail(w, fmt.Errorf("encoding the answer: %w", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(b, '\n'))
}
