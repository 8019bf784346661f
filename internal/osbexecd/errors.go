package osbexecd

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// execd's error codes (components/execd/pkg/web/model), and Hutch's own
// for what execd never says.
const (
	codeInvalidRequest   = "INVALID_REQUEST_BODY"
	codeMissingQuery     = "MISSING_QUERY"
	codeRuntimeError     = "RUNTIME_ERROR"
	codeInvalidFile      = "INVALID_FILE"
	codeInvalidContent   = "INVALID_FILE_CONTENT"
	codeInvalidMetadata  = "INVALID_FILE_METADATA"
	codeFileNotFound     = "FILE_NOT_FOUND"
	codeContextNotFound  = "CONTEXT_NOT_FOUND"
	codeNotFound         = "NOT_FOUND"
	codeMethodNotAllowed = "METHOD_NOT_ALLOWED"
	codeNotSupported     = "NOT_SUPPORTED"
	codeAlreadyExists    = "ALREADY_EXISTS"
	codeTooLarge         = "REQUEST_TOO_LARGE"
	codeRangeInvalid     = "RANGE_NOT_SATISFIABLE"
	codeTooMany          = "TOO_MANY_REQUESTS"
	codeUnavailable      = "SANDBOX_UNAVAILABLE"
	codePermission       = "PERMISSION_DENIED"
)

// errorBody is execd's ErrorResponse.
type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// writeError answers with status and execd's error body.
func writeError(w http.ResponseWriter, status int, code, message string) {
	h := w.Header()
	h.Del("Content-Length")
	h.Del("Content-Range")
	h.Del("Content-Disposition")
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	if status == http.StatusTooManyRequests && h.Get("Retry-After") == "" {
		h.Set("Retry-After", "5")
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(errorBody{Code: code, Message: message})
}

// apiError is an answer chosen where the error arises, for what the
// classes below cannot say (a missing query parameter, an unknown command).
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.message }

func badRequest(format string, args ...any) error {
	return &apiError{http.StatusBadRequest, codeInvalidRequest, fmt.Sprintf(format, args...)}
}

func missingQuery(name string) error {
	return &apiError{http.StatusBadRequest, codeMissingQuery, fmt.Sprintf("missing query parameter '%s'", name)}
}

// fail answers with err: an apiError as it is, an errdefs class (as
// classify made envd's answers into) with its status, anything else as a
// 500. This is the one place an error becomes a status.
func fail(w http.ResponseWriter, err error) {
	var ae *apiError
	if errors.As(err, &ae) {
		writeError(w, ae.status, ae.code, ae.message)
		return
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		writeError(w, http.StatusRequestEntityTooLarge, codeTooLarge, fmt.Sprintf("the request body is larger than %d bytes", mbe.Limit))
	case errors.Is(err, errdefs.ErrInvalidArgument):
		writeError(w, http.StatusBadRequest, codeInvalidRequest, err.Error())
	case errors.Is(err, errdefs.ErrNotFound):
		writeError(w, http.StatusNotFound, codeFileNotFound, err.Error())
	case errors.Is(err, errdefs.ErrAlreadyExists):
		writeError(w, http.StatusConflict, codeAlreadyExists, err.Error())
	case errors.Is(err, errdefs.ErrPermissionDenied):
		writeError(w, http.StatusForbidden, codePermission, err.Error())
	case errors.Is(err, errdefs.ErrResourceExhausted):
		writeError(w, http.StatusInsufficientStorage, codeRuntimeError, err.Error())
	case errors.Is(err, errdefs.ErrNotImplemented):
		writeError(w, http.StatusNotImplemented, codeNotSupported, err.Error())
	case errors.Is(err, errdefs.ErrUnavailable):
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, err.Error())
	default:
		writeError(w, http.StatusInternalServerError, codeRuntimeError, err.Error())
	}
}
