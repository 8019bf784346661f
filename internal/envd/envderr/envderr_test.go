package envderr_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"syscall"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"

	"github.com/hutch-sandbox/hutch/internal/envd/envderr"
	"github.com/hutch-sandbox/hutch/internal/envd/permissions"
	"github.com/hutch-sandbox/hutch/internal/envdapi"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// unknownUser is what permissions returns for a user the sandbox lacks.
var unknownUser = fmt.Errorf("user %q: %w: %w", "ghost", permissions.ErrUnknownUser, errdefs.ErrNotFound)

func pathErr(errno syscall.Errno) error {
	return &fs.PathError{Op: "open", Path: "/x", Err: errno}
}

// classes lists every class and OS error the mappers know, with the
// Connect code and the HTTP status each must become.
var classes = []struct {
	name   string
	err    error
	code   connect.Code
	status int
}{
	{"not found", fmt.Errorf("watcher %q: %w", "w1", errdefs.ErrNotFound), connect.CodeNotFound, 404},
	{"invalid argument", fmt.Errorf("bad: %w", errdefs.ErrInvalidArgument), connect.CodeInvalidArgument, 400},
	{"already exists", fmt.Errorf("dir: %w", errdefs.ErrAlreadyExists), connect.CodeAlreadyExists, 409},
	{"unavailable", fmt.Errorf("x: %w", errdefs.ErrUnavailable), connect.CodeInternal, 503},
	{"not implemented", fmt.Errorf("x: %w", errdefs.ErrNotImplemented), connect.CodeUnimplemented, 501},
	{"resource exhausted", fmt.Errorf("x: %w", errdefs.ErrResourceExhausted), connect.CodeResourceExhausted, 429},
	{"unauthenticated", fmt.Errorf("invalid signature: %w", envderr.ErrUnauthenticated), connect.CodeUnauthenticated, 401},
	{"unknown user before not found", unknownUser, connect.CodeUnauthenticated, 401},
	{"failed precondition", errdefs.Mark(errors.New("input first"), errdefs.ErrFailedPrecondition), connect.CodeFailedPrecondition, 409},
	{"internal", errdefs.Mark(errors.New("x"), envderr.ErrInternal), connect.CodeInternal, 500},
	{"internal before the OS error it marks", errdefs.Mark(pathErr(syscall.ENOENT), envderr.ErrInternal), connect.CodeInternal, 500},
	{"ENOENT", pathErr(syscall.ENOENT), connect.CodeNotFound, 404},
	{"fs.ErrNotExist", os.ErrNotExist, connect.CodeNotFound, 404},
	{"ENOTDIR", pathErr(syscall.ENOTDIR), connect.CodeNotFound, 400},
	{"EISDIR", pathErr(syscall.EISDIR), connect.CodeInvalidArgument, 400},
	{"ENAMETOOLONG", pathErr(syscall.ENAMETOOLONG), connect.CodeInvalidArgument, 400},
	{"EINVAL", pathErr(syscall.EINVAL), connect.CodeInvalidArgument, 500},
	{"ELOOP", pathErr(syscall.ELOOP), connect.CodeInternal, 400},
	{"EEXIST", pathErr(syscall.EEXIST), connect.CodeAlreadyExists, 500},
	{"EACCES", pathErr(syscall.EACCES), connect.CodePermissionDenied, 403},
	{"EPERM", pathErr(syscall.EPERM), connect.CodePermissionDenied, 403},
	{"EROFS", pathErr(syscall.EROFS), connect.CodePermissionDenied, 403},
	{"ENOSPC", pathErr(syscall.ENOSPC), connect.CodeInternal, 507},
	{"EDQUOT", pathErr(syscall.EDQUOT), connect.CodeInternal, 507},
	{"body too large", fmt.Errorf("reading: %w", &http.MaxBytesError{Limit: 1}), connect.CodeInternal, 413},
	{"deadline", fmt.Errorf("watch: %w", context.DeadlineExceeded), connect.CodeDeadlineExceeded, 500},
	{"canceled", context.Canceled, connect.CodeCanceled, 500},
	{"a Connect error keeps its code", fmt.Errorf("x: %w", connect.NewError(connect.CodeAborted, errors.New("y"))), connect.CodeAborted, 500},
	{"anything else", errors.New("boom"), connect.CodeInternal, 500},
}

func TestCode(t *testing.T) {
	for _, tc := range classes {
		t.Run(tc.name, func(t *testing.T) {
			if got := envderr.Code(tc.err); got != tc.code {
				t.Errorf("Code(%v) = %v, want %v", tc.err, got, tc.code)
			}
		})
	}
}

func TestStatus(t *testing.T) {
	for _, tc := range classes {
		t.Run(tc.name, func(t *testing.T) {
			if got := envderr.Status(tc.err); got != tc.status {
				t.Errorf("Status(%v) = %d, want %d", tc.err, got, tc.status)
			}
		})
	}
	if got := envderr.Status(nil); got != http.StatusOK {
		t.Errorf("Status(nil) = %d, want 200", got)
	}
}

func TestToConnect(t *testing.T) {
	if envderr.ToConnect(nil) != nil {
		t.Error("ToConnect(nil) is not nil")
	}
	for _, tc := range []struct {
		name string
		err  error
		code connect.Code
		msg  string
	}{
		// The message is the error's own text: Mark adds no words.
		{"marked", errdefs.Mark(errors.New("process with pid 7 not found"), errdefs.ErrNotFound), connect.CodeNotFound, "process with pid 7 not found"},
		{"wrapped", fmt.Errorf("list /x: not a directory: %w", errdefs.ErrInvalidArgument), connect.CodeInvalidArgument, "list /x: not a directory: invalid argument"},
		// A Connect error in the chain is the answer, its wrapping dropped.
		{"connect error", fmt.Errorf("outer: %w", connect.NewError(connect.CodeAborted, errors.New("inner"))), connect.CodeAborted, "inner"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ce *connect.Error
			if !errors.As(envderr.ToConnect(tc.err), &ce) {
				t.Fatalf("ToConnect(%v) is not a *connect.Error", tc.err)
			}
			if ce.Code() != tc.code || ce.Message() != tc.msg {
				t.Errorf("got %v %q, want %v %q", ce.Code(), ce.Message(), tc.code, tc.msg)
			}
		})
	}
}

func TestWrite(t *testing.T) {
	rec := httptest.NewRecorder()
	// Headers a download set before it failed must not describe the error.
	for _, k := range []string{"Content-Length", "Content-Encoding", "Content-Disposition", "Last-Modified", "Etag", "Accept-Ranges"} {
		rec.Header().Set(k, "stale")
	}
	envderr.Write(rec, http.StatusUnauthorized, "unauthorized access")
	if rec.Code != http.StatusUnauthorized {
		t.Errorf("status %d, want 401", rec.Code)
	}
	want := http.Header{"Content-Type": {"application/json"}, "X-Content-Type-Options": {"nosniff"}}
	if diff := cmp.Diff(want, rec.Header()); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
	if got, want := rec.Body.String(), `{"code":401,"message":"unauthorized access"}`+"\n"; got != want {
		t.Errorf("body %q, want %q", got, want)
	}
}

func TestWriteError(t *testing.T) {
	rec := httptest.NewRecorder()
	err := fmt.Errorf("path %q does not exist: %w", "/x", errdefs.ErrNotFound)
	if status := envderr.WriteError(rec, err); status != http.StatusNotFound {
		t.Errorf("returned %d, want 404", status)
	}
	var body envdapi.Error
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(envdapi.Error{Code: 404, Message: `path "/x" does not exist: not found`}, body); diff != "" || rec.Code != 404 {
		t.Errorf("status %d, body (-want +got):\n%s", rec.Code, diff)
	}
}

// TestInterceptor: a service mounted with the interceptor answers the
// errors its handlers return with the mapped code and their own message,
// on unary calls and streams alike.
func TestInterceptor(t *testing.T) {
	var ic connect.Interceptor = envderr.Interceptor()
	unary := ic.WrapUnary(func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) {
		return nil, errdefs.Mark(errors.New("process with pid 7 not found"), errdefs.ErrNotFound)
	})
	_, err := unary(context.Background(), nil)
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeNotFound || ce.Message() != "process with pid 7 not found" {
		t.Errorf("unary: %v", err)
	}
	ok := ic.WrapUnary(func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) { return nil, nil })
	if _, err := ok(context.Background(), nil); err != nil {
		t.Errorf("unary success: %v", err)
	}
	stream := ic.WrapStreamingHandler(func(context.Context, connect.StreamingHandlerConn) error {
		return fmt.Errorf("watch: %w", context.DeadlineExceeded)
	})
	if err := stream(context.Background(), nil); connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		t.Errorf("stream: %v", err)
	}
	done := ic.WrapStreamingHandler(func(context.Context, connect.StreamingHandlerConn) error { return nil })
	if err := done(context.Background(), nil); err != nil {
		t.Errorf("stream success: %v", err)
	}
}
