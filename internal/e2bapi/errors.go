package e2bapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// Messages of the 401 answers. The JS SDK shows them after its own
// "Unauthorized, please check your credentials. - ".
const (
	// MsgMissingAPIKey answers a request without X-API-KEY.
	MsgMissingAPIKey = "Missing API key (X-API-KEY header)"
	// MsgInvalidAPIKey answers a request whose key is malformed or unknown.
	MsgInvalidAPIKey = "Invalid API key"
	// MsgInternal is the only message a 500 ever carries.
	MsgInternal = "internal server error"
	// MsgPrivateNeedsSecure answers a v1 create with
	// network.allowPublicTraffic false and without "secure": true, as
	// E2B's API does (400).
	MsgPrivateNeedsSecure = "You cannot create a sandbox without public access unless you enable secure envd access via 'secure' flag."
)

// Error is the JSON body of every control-plane error (spec §2.2). Code must
// equal the HTTP status: the JS SDK reads body.code, not the status, to tell
// "not found" and "conflict" from other failures.
type Error struct {
	// Code is the HTTP status of the response.
	Code int `json:"code"`
	// Message is human text; the SDKs put it in their exception messages.
	Message string `json:"message"`
	// ErrorCode is an optional machine-readable code, e.g.
	// "sandbox_capacity_unavailable".
	ErrorCode string `json:"error_code,omitempty"`
}

// WriteError writes an error response: Content-Type application/json and
// the body {"code":status,"message":message[,"error_code":errorCode]}
// followed by a newline. It must be called before anything else is written
// to w. It never fails visibly: a write error means the client has gone.
func WriteError(w http.ResponseWriter, status int, message, errorCode string) {
	writeJSON(w, status, Error{Code: status, Message: message, ErrorCode: errorCode})
}

// sandboxNotFound502 is the envd-side body of §2.8, in the edge proxy's
// field order.
type sandboxNotFound502 struct {
	SandboxID string `json:"sandboxId"`
	Message   string `json:"message"`
	Code      int    `json:"code"`
}

// WriteSandboxNotFound502 answers envd traffic (requests carrying
// E2b-Sandbox-Id) for a dead or unknown sandbox the way E2B's edge proxy
// does (§2.8): HTTP 502 with
// {"sandboxId":"<id>","message":"The sandbox was not found","code":502}. The
// SDKs rely on the 502: isRunning() is false, REST calls become
// TimeoutError, streams SandboxNotFoundError. Never use it for control-plane
// requests, which answer 404.
func WriteSandboxNotFound502(w http.ResponseWriter, sandboxID string) {
	writeJSON(w, http.StatusBadGateway, sandboxNotFound502{
		SandboxID: sandboxID, Message: "The sandbox was not found", Code: http.StatusBadGateway,
	})
}

// WriteBadSandboxHost502 answers a request whose Host is under the sandbox
// domain but is not "<port>-<sandboxID>.<domain>": the edge proxy's 502,
// as for a sandbox that does not exist, saying what the name should be.
func WriteBadSandboxHost502(w http.ResponseWriter, host, domain string) {
	// Quoted up to the longest DNS name: a client's 48 KiB Host made an
	// answer as long, which a client that never reads kept the server
	// holding (review 24).
	if len(host) > 253 {
		host = host[:253] + "…"
	}
	writeJSON(w, http.StatusBadGateway, sandboxNotFound502{
		Message: fmt.Sprintf("The sandbox was not found: host %q is not <port>-<sandboxID>.%s", host, domain), Code: http.StatusBadGateway,
	})
}

// portClosed502 is the edge proxy's answer for a running sandbox whose
// port has no listener.
type portClosed502 struct {
	SandboxID string `json:"sandboxId"`
	Message   string `json:"message"`
	Port      int    `json:"port"`
	Code      int    `json:"code"`
}

// WritePortClosed502 answers traffic for a port of a running sandbox on
// which nothing listens, as E2B's edge proxy does: HTTP 502 with
// {"sandboxId":…,"message":"The sandbox is running but port is not open","port":N,"code":502}.
func WritePortClosed502(w http.ResponseWriter, sandboxID string, port int) {
	writeJSON(w, http.StatusBadGateway, portClosed502{
		SandboxID: sandboxID, Message: "The sandbox is running but port is not open", Port: port, Code: http.StatusBadGateway,
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only strings and ints above: cannot happen.
		panic("e2bapi: encoding an error body: " + err.Error())
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// StatusError is an error that carries the HTTP answer to give. Handlers
// return one (directly or wrapped) and [Write] sends it. Message is sent to
// the client verbatim, so it must be written for the client; Err, if set, is
// only logged (for 5xx) and is what errors.Is/As see through Unwrap.
type StatusError struct {
	// Status is the HTTP status and the body's code.
	Status int
	// Message is the body's message.
	Message string
	// ErrorCode is the body's optional error_code.
	ErrorCode string
	// RetryAfter, when positive, is sent as an integer Retry-After header
	// (seconds, rounded up): the JS SDK retries 429s only with one.
	RetryAfter time.Duration
	// Err is the underlying cause, never sent.
	Err error
}

// Error returns the client message, with the cause when there is one.
func (e *StatusError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%d %s: %v", e.Status, e.Message, e.Err)
	}
	return fmt.Sprintf("%d %s", e.Status, e.Message)
}

// Unwrap returns the cause.
func (e *StatusError) Unwrap() error { return e.Err }

// BadRequest is a 400 with the given message.
func BadRequest(message string) *StatusError {
	return &StatusError{Status: http.StatusBadRequest, Message: message}
}

// BadRequestf is a 400 with a formatted message.
func BadRequestf(format string, args ...any) *StatusError {
	return BadRequest(fmt.Sprintf(format, args...))
}

// Unauthorized is a 401; message is usually [MsgMissingAPIKey] or
// [MsgInvalidAPIKey].
func Unauthorized(message string) *StatusError {
	return &StatusError{Status: http.StatusUnauthorized, Message: message}
}

// NotFound is a 404 with the given message.
func NotFound(message string) *StatusError {
	return &StatusError{Status: http.StatusNotFound, Message: message}
}

// SandboxNotFound is the control-plane 404 for a sandbox ID:
// sandbox "<id>" not found. (envd traffic answers
// [WriteSandboxNotFound502] instead.)
func SandboxNotFound(sandboxID string) *StatusError {
	return NotFound(fmt.Sprintf("sandbox %q not found", sandboxID))
}

// Conflict is a 409, e.g. pausing a paused sandbox (the SDK then returns
// false).
func Conflict(message string) *StatusError {
	return &StatusError{Status: http.StatusConflict, Message: message}
}

// TooLarge is a 413 for a body over limit bytes.
func TooLarge(limit int64) *StatusError {
	return &StatusError{Status: http.StatusRequestEntityTooLarge,
		Message: fmt.Sprintf("request body is larger than %d bytes", limit)}
}

// TooManyRequests is a 429 with an integer Retry-After of retryAfter rounded
// up to whole seconds (at least 1), which makes the JS SDK retry by itself.
func TooManyRequests(retryAfter time.Duration, message string) *StatusError {
	if retryAfter < time.Second {
		retryAfter = time.Second
	}
	return &StatusError{Status: http.StatusTooManyRequests, Message: message, RetryAfter: retryAfter}
}

// NotSupported is a 501 for a feature the protocol has and Hutch does not
// (yet): "<feature> is not supported by Hutch yet". feature is e.g.
// "pause", "fork", "snapshots", "network update", "volumes".
func NotSupported(feature string) *StatusError {
	return &StatusError{Status: http.StatusNotImplemented, Message: feature + " is not supported by Hutch yet"}
}

// Internal is a 500 whose body says only [MsgInternal]; err is logged by
// [Write], never sent.
func Internal(err error) *StatusError {
	return &StatusError{Status: http.StatusInternalServerError, Message: MsgInternal, Err: err}
}

// Write sends err as an E2B error response. The status is chosen once, here:
//
//   - a [*StatusError] anywhere in the chain: its status, message, error
//     code and Retry-After (and Should-Retry, see setShouldRetry);
//   - errdefs.ErrNotImplemented → 501, ErrNotFound → 404,
//     ErrInvalidArgument → 400, ErrAlreadyExists and
//     ErrFailedPrecondition (the sandbox's state does not allow it) → 409,
//     ErrUnavailable → 503 (the JS SDK's ServiceBusyError),
//     ErrResourceExhausted → 429 (RateLimitError in both SDKs; no
//     Retry-After, so the JS SDK does not retry), each with
//     err.Error() as the message: core code that wraps these classes must
//     word its errors for clients;
//   - anything else → 500 with [MsgInternal]; the error itself goes only to
//     logger, never to the client.
//
// 5xx errors are logged at Error level with their cause. A nil logger means
// slog.Default(). A nil err writes nothing.
func Write(w http.ResponseWriter, logger *slog.Logger, err error) {
	if err == nil {
		return
	}
	se := toStatusError(err)
	if se.Status >= 500 {
		if logger == nil {
			logger = slog.Default()
		}
		logger.Error("e2bapi: request failed", "status", se.Status, "err", err)
	}
	if se.RetryAfter > 0 {
		secs := math.Ceil(se.RetryAfter.Seconds())
		w.Header().Set("Retry-After", strconv.FormatInt(int64(secs), 10))
	}
	setShouldRetry(w.Header(), se)
	WriteError(w, se.Status, se.Message, se.ErrorCode)
}

// setShouldRetry tells the Python SDK what Retry-After tells the JS SDK.
// The Python SDK (2.63) retries every 429, 502, 503 and 504 three times,
// with backoff, unless a Should-Retry header says otherwise; the JS SDK
// retries only a 429 with Retry-After. So: Should-Retry: true beside a
// Retry-After, and false on those statuses without one (a cap that only
// a kill lifts, a sandbox in a state that forbids the call), which both
// SDKs then raise at once.
func setShouldRetry(h http.Header, se *StatusError) {
	switch {
	case se.RetryAfter > 0:
		h.Set("Should-Retry", "true")
	case se.Status == http.StatusTooManyRequests, se.Status == http.StatusBadGateway,
		se.Status == http.StatusServiceUnavailable, se.Status == http.StatusGatewayTimeout:
		h.Set("Should-Retry", "false")
	}
}

// StatusOf is the HTTP status [Write] would send for err (200 for nil).
func StatusOf(err error) int {
	if err == nil {
		return http.StatusOK
	}
	return toStatusError(err).Status
}

func toStatusError(err error) *StatusError {
	var se *StatusError
	if errors.As(err, &se) {
		if se.Status < 400 || se.Status > 599 {
			// A programming error: never send a success for an error.
			return Internal(err)
		}
		return se
	}
	for _, c := range []struct {
		class  error
		status int
	}{
		{errdefs.ErrNotImplemented, http.StatusNotImplemented},
		{errdefs.ErrNotFound, http.StatusNotFound},
		{errdefs.ErrInvalidArgument, http.StatusBadRequest},
		{errdefs.ErrAlreadyExists, http.StatusConflict},
		{errdefs.ErrFailedPrecondition, http.StatusConflict},
		{errdefs.ErrPermissionDenied, http.StatusForbidden},
		{errdefs.ErrUnavailable, http.StatusServiceUnavailable},
		{errdefs.ErrResourceExhausted, http.StatusTooManyRequests},
	} {
		if errors.Is(err, c.class) {
			return &StatusError{Status: c.status, Message: err.Error(), Err: err}
		}
	}
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return TooLarge(tooLarge.Limit)
	}
	return Internal(err)
}

// ErrorOf is err as the JSON error body [Write] would send, for an error
// that goes inside a successful answer (a fork that failed among several).
func ErrorOf(err error) *Error {
	se := toStatusError(err)
	return &Error{Code: se.Status, Message: se.Message, ErrorCode: se.ErrorCode}
}
