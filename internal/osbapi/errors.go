package osbapi

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// Error codes. OpenSandbox's server names its codes "<RUNTIME>::<WHAT>"
// (DOCKER::SANDBOX_NOT_FOUND) with a few shared "SANDBOX::" ones; Hutch
// is the runtime here.
const (
	CodeInvalidParameter = "SANDBOX::INVALID_PARAMETER"
	CodeInternal         = "SANDBOX::INTERNAL_ERROR"
	CodeNotSupported     = "SANDBOX::API_NOT_SUPPORTED"
	CodeUnauthorized     = "HUTCH::UNAUTHORIZED"
	CodeForbidden        = "HUTCH::FORBIDDEN"
	CodeNotFound         = "HUTCH::SANDBOX_NOT_FOUND"
	CodeSnapshotNotFound = "HUTCH::SNAPSHOT_NOT_FOUND"
	CodeImagePull        = "HUTCH::SANDBOX_IMAGE_PULL_FAILED"
	CodeInvalidState     = "HUTCH::INVALID_STATE"
	CodeConflict         = "HUTCH::CONFLICT"
	CodeExhausted        = "HUTCH::CAPACITY_EXHAUSTED"
	CodeUnavailable      = "HUTCH::UNAVAILABLE"
	CodeTooLarge         = "HUTCH::REQUEST_TOO_LARGE"
)

// ErrorResponse is OpenSandbox's error body.
type ErrorResponse struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// StatusError is an error with the status and code to answer it with.
type StatusError struct {
	Status  int
	Code    string
	Message string
	Err     error // the cause, for the log; may be nil
}

func (e *StatusError) Error() string { return e.Message }

// Unwrap returns the cause.
func (e *StatusError) Unwrap() error { return e.Err }

// Errorf is a StatusError with a formatted message.
func Errorf(status int, code, message string) *StatusError {
	return &StatusError{Status: status, Code: code, Message: message}
}

// BadRequest is a 400 SANDBOX::INVALID_PARAMETER.
func BadRequest(message string) *StatusError {
	return Errorf(http.StatusBadRequest, CodeInvalidParameter, message)
}

// MsgInternal is the message of every 500: the cause goes to the log only.
const MsgInternal = "internal error; the server's log has the cause"

// Of is the StatusError err is answered with: a StatusError as it is; an
// error of an internal/errdefs class with that class's status and code and
// its own message; anything else 500 with MsgInternal.
func Of(err error) *StatusError {
	var se *StatusError
	if errors.As(err, &se) && se.Status >= 400 && se.Status <= 599 {
		return se
	}
	for _, c := range []struct {
		class  error
		status int
		code   string
	}{
		{errdefs.ErrNotImplemented, http.StatusNotImplemented, CodeNotSupported},
		{errdefs.ErrNotFound, http.StatusNotFound, CodeNotFound},
		{errdefs.ErrInvalidArgument, http.StatusBadRequest, CodeInvalidParameter},
		{errdefs.ErrAlreadyExists, http.StatusConflict, CodeConflict},
		{errdefs.ErrFailedPrecondition, http.StatusConflict, CodeInvalidState},
		{errdefs.ErrPermissionDenied, http.StatusForbidden, CodeForbidden},
		{errdefs.ErrUnavailable, http.StatusServiceUnavailable, CodeUnavailable},
		{errdefs.ErrResourceExhausted, http.StatusTooManyRequests, CodeExhausted},
	} {
		if errors.Is(err, c.class) {
			return &StatusError{Status: c.status, Code: c.code, Message: err.Error(), Err: err}
		}
	}
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return &StatusError{Status: http.StatusRequestEntityTooLarge, Code: CodeTooLarge,
			Message: "request body larger than " + strconv.FormatInt(tooLarge.Limit, 10) + " bytes", Err: err}
	}
	return &StatusError{Status: http.StatusInternalServerError, Code: CodeInternal, Message: MsgInternal, Err: err}
}

// Write answers err in OpenSandbox's error shape; 5xx causes are logged.
// A nil err writes nothing.
func Write(w http.ResponseWriter, logger *slog.Logger, err error) {
	if err == nil {
		return
	}
	se := Of(err)
	if se.Status >= 500 && logger != nil {
		logger.Error("osbapi: request failed", "status", se.Status, "err", err)
	}
	WriteJSON(w, se.Status, ErrorResponse{Code: se.Code, Message: se.Message})
}

// WriteJSON answers v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
