package e2bapi_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/e2bapi"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

func TestWriteError(t *testing.T) {
	tests := []struct {
		name             string
		status           int
		message, errCode string
		want             string
	}{
		{"plain", 404, `sandbox "abc" not found`, "", `{"code":404,"message":"sandbox \"abc\" not found"}` + "\n"},
		{"with error_code", 503, "no capacity", "sandbox_capacity_unavailable",
			`{"code":503,"message":"no capacity","error_code":"sandbox_capacity_unavailable"}` + "\n"},
		{"html not escaped", 400, "a<b & c>d", "", `{"code":400,"message":"a<b & c>d"}` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			e2bapi.WriteError(rec, tt.status, tt.message, tt.errCode)
			checkResponse(t, rec, tt.status, tt.want)
		})
	}
}

func checkResponse(t *testing.T, rec *httptest.ResponseRecorder, status int, body string) {
	t.Helper()
	if rec.Code != status {
		t.Errorf("status = %d, want %d", rec.Code, status)
	}
	if got := rec.Header().Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", got)
	}
	if got := rec.Body.String(); got != body {
		t.Errorf("body = %q, want %q", got, body)
	}
	if got, want := rec.Header().Get("Content-Length"), fmt.Sprint(len(body)); got != want {
		t.Errorf("Content-Length = %q, want %q", got, want)
	}
}

func TestWriteSandboxNotFound502(t *testing.T) {
	rec := httptest.NewRecorder()
	e2bapi.WriteSandboxNotFound502(rec, "i1a2b3c")
	checkResponse(t, rec, 502, `{"sandboxId":"i1a2b3c","message":"The sandbox was not found","code":502}`+"\n")
}

// TestWriteShouldRetry: the Python SDK retries a 429, 502, 503 or 504
// unless Should-Retry says no; Hutch says yes exactly when it sends a
// Retry-After (as the JS SDK reads it), no otherwise.
func TestWriteShouldRetry(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want string
	}{
		{"429 with Retry-After", e2bapi.TooManyRequests(time.Second, "slow down"), "true"},
		{"a cap", fmt.Errorf("at most 3 sandboxes per key: %w", errdefs.ErrResourceExhausted), "false"},
		{"unavailable", fmt.Errorf("no free uid range: %w", errdefs.ErrUnavailable), "false"},
		{"502", &e2bapi.StatusError{Status: 502, Message: "bad gateway"}, "false"},
		{"504", &e2bapi.StatusError{Status: 504, Message: "timeout"}, "false"},
		{"not found", e2bapi.SandboxNotFound("x"), ""},
		{"internal", errors.New("boom"), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			e2bapi.Write(rec, slog.New(slog.NewTextHandler(io.Discard, nil)), tt.err)
			if got := rec.Header().Get("Should-Retry"); got != tt.want {
				t.Errorf("Should-Retry = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestWrite(t *testing.T) {
	secret := errors.New("open /var/lib/hutch/db.sqlite: permission denied")
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantBody   string
		retryAfter string
		wantLog    bool
	}{
		{"bad request", e2bapi.BadRequestf("timeout: must not be negative, got %d", -1), 400,
			`{"code":400,"message":"timeout: must not be negative, got -1"}`, "", false},
		{"unauthorized", e2bapi.Unauthorized(e2bapi.MsgInvalidAPIKey), 401,
			`{"code":401,"message":"Invalid API key"}`, "", false},
		{"sandbox not found", e2bapi.SandboxNotFound("abc123"), 404,
			`{"code":404,"message":"sandbox \"abc123\" not found"}`, "", false},
		{"wrapped status error", fmt.Errorf("handler: %w", e2bapi.Conflict("sandbox \"x\" is already paused")), 409,
			`{"code":409,"message":"sandbox \"x\" is already paused"}`, "", false},
		{"too large", e2bapi.TooLarge(1024), 413,
			`{"code":413,"message":"request body is larger than 1024 bytes"}`, "", false},
		{"rate limited", e2bapi.TooManyRequests(1500*time.Millisecond, "too many sandboxes being created"), 429,
			`{"code":429,"message":"too many sandboxes being created"}`, "2", false},
		{"rate limited minimum", e2bapi.TooManyRequests(0, "slow down"), 429,
			`{"code":429,"message":"slow down"}`, "1", false},
		{"not supported", e2bapi.NotSupported("pause"), 501,
			`{"code":501,"message":"pause is not supported by Hutch yet"}`, "", true},
		{"errdefs not found", fmt.Errorf("sandbox %q: %w", "x", errdefs.ErrNotFound), 404,
			`{"code":404,"message":"sandbox \"x\": not found"}`, "", false},
		{"errdefs invalid", fmt.Errorf("template name %q: %w", "a b", errdefs.ErrInvalidArgument), 400,
			`{"code":400,"message":"template name \"a b\": invalid argument"}`, "", false},
		{"errdefs exists", fmt.Errorf("alias: %w", errdefs.ErrAlreadyExists), 409,
			`{"code":409,"message":"alias: already exists"}`, "", false},
		{"errdefs failed precondition", fmt.Errorf("sandbox x is frozen: %w", errdefs.ErrFailedPrecondition), 409,
			`{"code":409,"message":"sandbox x is frozen: ` + errdefs.ErrFailedPrecondition.Error() + `"}`, "", false},
		{"errdefs not implemented", fmt.Errorf("fork: %w", errdefs.ErrNotImplemented), 501,
			`{"code":501,"message":"fork: not implemented"}`, "", true},
		{"errdefs unavailable", fmt.Errorf("no free uid range: %w", errdefs.ErrUnavailable), 503,
			`{"code":503,"message":"no free uid range: unavailable"}`, "", true},
		{"errdefs resource exhausted", fmt.Errorf("at most 3 sandboxes per key: %w", errdefs.ErrResourceExhausted), 429,
			`{"code":429,"message":"at most 3 sandboxes per key: resource exhausted"}`, "", false},
		{"unknown error", secret, 500, `{"code":500,"message":"internal server error"}`, "", true},
		{"internal", e2bapi.Internal(secret), 500, `{"code":500,"message":"internal server error"}`, "", true},
		{"status error with 2xx", &e2bapi.StatusError{Status: 200, Message: "ok?"}, 500,
			`{"code":500,"message":"internal server error"}`, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			logger := slog.New(slog.NewTextHandler(&logs, nil))
			rec := httptest.NewRecorder()
			e2bapi.Write(rec, logger, tt.err)
			checkResponse(t, rec, tt.wantStatus, tt.wantBody+"\n")
			if got := rec.Header().Get("Retry-After"); got != tt.retryAfter {
				t.Errorf("Retry-After = %q, want %q", got, tt.retryAfter)
			}
			if got := logs.Len() > 0; got != tt.wantLog {
				t.Errorf("logged = %v, want %v (%q)", got, tt.wantLog, logs.String())
			}
			if tt.wantStatus == 500 && !strings.Contains(logs.String(), "permission denied") && tt.err == secret {
				t.Errorf("log %q lacks the cause", logs.String())
			}
			if got := e2bapi.StatusOf(tt.err); got != tt.wantStatus {
				t.Errorf("StatusOf = %d, want %d", got, tt.wantStatus)
			}
		})
	}
}

func TestWriteNil(t *testing.T) {
	rec := httptest.NewRecorder()
	e2bapi.Write(rec, nil, nil)
	if rec.Body.Len() != 0 || rec.Header().Get("Content-Type") != "" {
		t.Errorf("Write(nil) wrote %d %q", rec.Code, rec.Body.String())
	}
	if got := e2bapi.StatusOf(nil); got != http.StatusOK {
		t.Errorf("StatusOf(nil) = %d", got)
	}
}

func TestStatusErrorUnwrap(t *testing.T) {
	cause := errors.New("disk on fire")
	err := fmt.Errorf("create: %w", e2bapi.Internal(cause))
	if !errors.Is(err, cause) {
		t.Errorf("errors.Is(%v, cause) = false", err)
	}
	var se *e2bapi.StatusError
	if !errors.As(err, &se) || se.Status != 500 {
		t.Errorf("errors.As: %v", se)
	}
	if s := se.Error(); !strings.Contains(s, "disk on fire") {
		t.Errorf("Error() = %q lacks the cause (for logs)", s)
	}
}
