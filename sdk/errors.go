package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"connectrpc.com/connect"
)

// Kinds of failure. An [*Error] unwraps to exactly one of them (or to none,
// for failures the protocol does not classify); test with errors.Is.
var (
	// ErrNotFound: the sandbox, file, directory or process does not exist.
	ErrNotFound = errors.New("not found")
	// ErrAuthentication: the API key or the sandbox's access token was
	// missing or wrong, or the user does not exist in the sandbox.
	ErrAuthentication = errors.New("authentication failed")
	// ErrInvalidArgument: the server refused the request's content.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrAlreadyExists: the directory or other object exists already.
	ErrAlreadyExists = errors.New("already exists")
	// ErrConflict: the sandbox is not in a state that allows the operation.
	ErrConflict = errors.New("conflict")
	// ErrTimeout: a deadline passed — a command's Timeout, the request
	// timeout, or the context's deadline (then the error also matches
	// context.DeadlineExceeded).
	ErrTimeout = errors.New("timeout")
	// ErrNotRunning: the sandbox is not running any more (it timed out or
	// was killed); its daemon cannot be reached.
	ErrNotRunning = errors.New("sandbox is not running")
	// ErrRateLimit: the server asks to slow down.
	ErrRateLimit = errors.New("rate limited")
	// ErrNotEnoughSpace: the sandbox's disk is full.
	ErrNotEnoughSpace = errors.New("not enough space")
	// ErrPermissionDenied: the sandbox user may not do that.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrUnavailable: the server is busy or shutting down.
	ErrUnavailable = errors.New("service unavailable")
	// ErrOutputLimit: a command's output passed its RunOptions.MaxOutput,
	// and the command was killed.
	ErrOutputLimit = errors.New("output limit exceeded")
)

// Error is a failure reported by the control plane or by a sandbox's
// daemon.
type Error struct {
	// Op says what was attempted, e.g. "create sandbox" or "read /etc/x".
	Op string
	// Kind is the sentinel the failure matches (ErrNotFound, …) or nil.
	Kind error
	// StatusCode is the HTTP status of a REST failure; 0 for RPC failures.
	StatusCode int
	// Code is the Connect code of an RPC failure ("not_found", …), empty
	// for REST failures.
	Code string
	// Message is the server's explanation.
	Message string
	// Err is the underlying error, if any (a transport or context error).
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Op != "" {
		b.WriteString(e.Op)
		b.WriteString(": ")
	}
	switch {
	case e.Message != "":
		b.WriteString(e.Message)
	case e.Kind != nil:
		b.WriteString(e.Kind.Error())
	case e.Err != nil:
		b.WriteString(e.Err.Error())
	case e.StatusCode != 0:
		b.WriteString(http.StatusText(e.StatusCode))
	default:
		b.WriteString("failed")
	}
	return b.String()
}

// Unwrap returns the kind and the underlying error, so that errors.Is
// matches either.
func (e *Error) Unwrap() []error {
	var errs []error
	if e.Kind != nil {
		errs = append(errs, e.Kind)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// CommandExitError is returned, together with the result, by a command that
// ended with a non-zero exit status (or was killed: ExitCode -1).
type CommandExitError struct {
	CommandResult
}

func (e *CommandExitError) Error() string {
	msg := fmt.Sprintf("command exited with code %d", e.ExitCode)
	if e.CommandResult.Error != "" && e.CommandResult.Error != fmt.Sprintf("exit status %d", e.ExitCode) {
		msg += ": " + e.CommandResult.Error
	}
	return msg
}

// kindOfStatus classifies an HTTP status, as E2B's SDKs do.
func kindOfStatus(status int) error {
	switch status {
	case http.StatusBadRequest:
		return ErrInvalidArgument
	case http.StatusUnauthorized:
		return ErrAuthentication
	case http.StatusForbidden:
		return ErrPermissionDenied
	case http.StatusNotFound:
		return ErrNotFound
	case http.StatusConflict:
		return ErrConflict
	case http.StatusTooManyRequests:
		return ErrRateLimit
	case http.StatusBadGateway:
		return ErrNotRunning
	case http.StatusServiceUnavailable:
		return ErrUnavailable
	case http.StatusGatewayTimeout:
		return ErrTimeout
	case http.StatusInsufficientStorage:
		return ErrNotEnoughSpace
	}
	return nil
}

// httpError reads a failed response's body (E2B's {"code","message"} JSON,
// or any text) into an *Error.
func httpError(op string, resp *http.Response) *Error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e struct {
		Message string `json:"message"`
	}
	msg := ""
	if json.Unmarshal(body, &e) == nil && e.Message != "" {
		msg = e.Message
	} else if s := strings.TrimSpace(string(body)); s != "" && !strings.HasPrefix(s, "<") {
		msg = s
	}
	if msg == "" {
		msg = fmt.Sprintf("%d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	return &Error{Op: op, Kind: kindOfStatus(resp.StatusCode), StatusCode: resp.StatusCode, Message: msg}
}

// transportError wraps a failure to get any answer at all.
func transportError(op string, err error) error {
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	out := &Error{Op: op, Err: err}
	if errors.Is(err, context.DeadlineExceeded) {
		out.Kind = ErrTimeout
	}
	return out
}

// rpcError converts a Connect error into an *Error. Errors that are not
// Connect errors pass through transportError.
func rpcError(op string, err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return transportError(op, err)
	}
	out := &Error{Op: op, Code: ce.Code().String(), Message: ce.Message()}
	switch ce.Code() {
	case connect.CodeNotFound:
		out.Kind = ErrNotFound
	case connect.CodeUnauthenticated:
		out.Kind = ErrAuthentication
	case connect.CodePermissionDenied:
		out.Kind = ErrPermissionDenied
	case connect.CodeInvalidArgument, connect.CodeFailedPrecondition, connect.CodeOutOfRange:
		out.Kind = ErrInvalidArgument
	case connect.CodeAlreadyExists:
		out.Kind = ErrAlreadyExists
	case connect.CodeResourceExhausted:
		out.Kind = ErrRateLimit
	case connect.CodeDeadlineExceeded:
		out.Kind = ErrTimeout
		out.Err = context.DeadlineExceeded
	case connect.CodeCanceled:
		out.Err = context.Canceled
	case connect.CodeUnavailable:
		// A 502 from the edge: the sandbox is gone (spec §2.8).
		out.Kind = ErrNotRunning
		if out.Message == "" || strings.HasPrefix(out.Message, "HTTP status 502") {
			out.Message = "the sandbox is not running (it timed out or was killed)"
		}
	case connect.CodeUnimplemented:
		// A plain 404 from something that is not envd.
		out.Kind = ErrNotFound
	}
	if out.Message == "" {
		out.Message = ce.Error()
	}
	return out
}
