package sdk

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/envdapi"
)

// The code interpreter: a server on port CodeInterpreterPort of sandboxes
// made from a code interpreter template, which runs code in stateful
// contexts (Jupyter kernels) and streams what it printed, displayed and
// returned. The wire protocol is E2B's, as its code interpreter SDKs
// (e2b-code-interpreter, @e2b/code-interpreter) speak it.

const (
	// CodeInterpreterPort is the port of the code interpreter server in
	// a code interpreter sandbox (E2B's JUPYTER_PORT).
	CodeInterpreterPort = 49999
	// CodeInterpreterTemplate is the template whose sandboxes run the
	// code interpreter, as E2B's code interpreter SDKs name it: create
	// sandboxes for [Sandbox.RunCode] with CreateOptions{Template:
	// CodeInterpreterTemplate}.
	CodeInterpreterTemplate = "code-interpreter-v1"
	// DefaultCodeTimeout is how long RunCode waits for code whose
	// RunCodeOptions.Timeout is 0, as in E2B's SDKs.
	DefaultCodeTimeout = 60 * time.Second
	// maxCodeLine bounds one line of the execution's stream (a result
	// with a large image is one line); a longer one ends RunCode with an
	// error.
	maxCodeLine = 64 << 20
)

// CodeContext is a context code runs in: one kernel, with its own
// variables, imports and working directory, kept between RunCode calls.
type CodeContext struct {
	// ID names the context in RunCodeOptions.Context and the other
	// context calls.
	ID string `json:"id"`
	// Language is the context's language ("python", "javascript",
	// "typescript", "bash", …).
	Language string `json:"language"`
	// Cwd is the context's working directory.
	Cwd string `json:"cwd"`
}

// RunCodeOptions configure [Sandbox.RunCode]. The zero value (or nil)
// runs Python in the default Python context.
type RunCodeOptions struct {
	// Language runs the code in the default context of this language
	// ("python", "javascript", "typescript", "bash"); empty means Python,
	// unless Context is set. Setting both Language and Context is an
	// error (ErrInvalidArgument), before any request.
	Language string
	// Context runs the code in this context (from
	// [Sandbox.CreateCodeContext] or [Sandbox.ListCodeContexts]).
	Context *CodeContext
	// Envs are environment variables the code sees during this
	// execution.
	Envs map[string]string
	// Timeout ends the execution after this long, counted from the
	// call: the request is cancelled, the server interrupts the cell
	// (the context keeps its state) and RunCode returns an error of
	// kind ErrTimeout saying the execution timed out. 0 means
	// DefaultCodeTimeout; NoTimeout means none (the context still
	// bounds the call).
	Timeout time.Duration

	// OnStdout and OnStderr are called with each piece of output as it
	// arrives; OnResult with each result (display data and the main
	// result); OnError with the error the code raised. They are called
	// in the order the server sent them, from the goroutine that called
	// RunCode, which waits for each to return.
	OnStdout, OnStderr func(OutputMessage)
	OnResult           func(Result)
	OnError            func(ExecutionError)
}

// OutputMessage is one piece of output the code printed.
type OutputMessage struct {
	// Line is the text, as it was printed (usually ending in a newline).
	Line string
	// Timestamp is when the server saw it; zero when it did not say.
	Timestamp time.Time
	// Error is true for standard error.
	Error bool
}

// Execution is what running code produced: its results, its output and
// the error it raised, if any.
type Execution struct {
	// Results are the cell's results in the order they came: display
	// data (plots, tables, display() calls) and the value of the cell's
	// last expression, the main result (IsMainResult).
	Results []Result `json:"results"`
	// Logs are what the code printed.
	Logs Logs `json:"logs"`
	// Error is the error the code raised; nil when it raised none. A
	// raised error is the code's outcome, not RunCode's failure: RunCode
	// returns it here with a nil error, as E2B's SDKs do.
	Error *ExecutionError `json:"error,omitempty"`
	// ExecutionCount is the context's execution counter after this
	// execution (Jupyter's In [N]); 0 when the server did not say.
	ExecutionCount int `json:"execution_count,omitempty"`
}

// Text returns the text of the main result (the value of the cell's last
// expression, as Python's repr shows it); "" when there is none.
func (e *Execution) Text() string {
	for _, r := range e.Results {
		if r.IsMainResult {
			return r.Text
		}
	}
	return ""
}

// Logs are what code printed, one entry per piece of output as it came.
type Logs struct {
	Stdout []string `json:"stdout"`
	Stderr []string `json:"stderr"`
}

// ExecutionError is an error the code raised.
type ExecutionError struct {
	// Name is the error's type, e.g. "ZeroDivisionError".
	Name string `json:"name"`
	// Value is its message, e.g. "division by zero".
	Value string `json:"value"`
	// Traceback is the traceback as the kernel formats it (it may hold
	// terminal colour codes).
	Traceback string `json:"traceback"`
}

// Error returns "Name: Value", so that an ExecutionError can be returned
// as an error by the caller.
func (e *ExecutionError) Error() string {
	if e.Value == "" {
		return e.Name
	}
	return e.Name + ": " + e.Value
}

// Result is one result of a cell: the same value in every format the
// kernel could give it. Only the formats present are set. Binary formats
// (PNG, JPEG, PDF) are base64, as the server sends them.
type Result struct {
	Text       string `json:"text,omitempty"`
	HTML       string `json:"html,omitempty"`
	Markdown   string `json:"markdown,omitempty"`
	SVG        string `json:"svg,omitempty"`
	PNG        string `json:"png,omitempty"`
	JPEG       string `json:"jpeg,omitempty"`
	PDF        string `json:"pdf,omitempty"`
	LaTeX      string `json:"latex,omitempty"`
	JavaScript string `json:"javascript,omitempty"`
	// JSON is the application/json representation, as sent.
	JSON json.RawMessage `json:"json,omitempty"`
	// Data is a dataframe's data (e2b/data), as sent.
	Data json.RawMessage `json:"data,omitempty"`
	// Chart is the chart E2B's charts module extracted from a plot
	// (e2b/chart), as sent.
	Chart json.RawMessage `json:"chart,omitempty"`
	// Extra holds the formats of no field above, by the server's key
	// (a MIME type).
	Extra map[string]json.RawMessage `json:"extra,omitempty"`
	// IsMainResult is true for the value of the cell's last expression
	// (Jupyter's execute_result), false for display data.
	IsMainResult bool `json:"is_main_result"`
}

// Formats names the formats the result has, in the order of E2B's SDKs:
// "text", "html", "markdown", "svg", "png", "jpeg", "pdf", "latex",
// "json", "javascript", "data", "chart", then Extra's keys.
func (r *Result) Formats() []string {
	var out []string
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"text", r.Text != ""}, {"html", r.HTML != ""}, {"markdown", r.Markdown != ""}, {"svg", r.SVG != ""},
		{"png", r.PNG != ""}, {"jpeg", r.JPEG != ""}, {"pdf", r.PDF != ""}, {"latex", r.LaTeX != ""},
		{"json", len(r.JSON) > 0}, {"javascript", r.JavaScript != ""}, {"data", len(r.Data) > 0}, {"chart", len(r.Chart) > 0},
	} {
		if f.set {
			out = append(out, f.name)
		}
	}
	for k := range r.Extra {
		out = append(out, k)
	}
	return out
}

// UnmarshalJSON reads a result line of the protocol: the known keys into
// their fields, any other (but "type") into Extra.
func (r *Result) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*r = Result{}
	str := map[string]*string{
		"text": &r.Text, "html": &r.HTML, "markdown": &r.Markdown, "svg": &r.SVG, "png": &r.PNG,
		"jpeg": &r.JPEG, "pdf": &r.PDF, "latex": &r.LaTeX, "javascript": &r.JavaScript,
	}
	raw := map[string]*json.RawMessage{"json": &r.JSON, "data": &r.Data, "chart": &r.Chart}
	for k, v := range m {
		if isNull(v) {
			continue
		}
		switch {
		case k == "type":
		case k == "is_main_result":
			if err := json.Unmarshal(v, &r.IsMainResult); err != nil {
				return fmt.Errorf("is_main_result: %w", err)
			}
		case str[k] != nil:
			if err := json.Unmarshal(v, str[k]); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
		case raw[k] != nil:
			*raw[k] = v
		case k == "extra":
			var extra map[string]json.RawMessage
			if err := json.Unmarshal(v, &extra); err != nil {
				return fmt.Errorf("extra: %w", err)
			}
			for ek, ev := range extra {
				r.addExtra(ek, ev)
			}
		default:
			r.addExtra(k, v)
		}
	}
	return nil
}

func (r *Result) addExtra(k string, v json.RawMessage) {
	if r.Extra == nil {
		r.Extra = map[string]json.RawMessage{}
	}
	r.Extra[k] = v
}

func isNull(v json.RawMessage) bool { return string(bytes.TrimSpace(v)) == "null" }

// codeRequest makes a request to the sandbox's code interpreter through
// the server's port routing ([Sandbox.PortRequest]), with a JSON body
// when in is not nil.
func (s *Sandbox) codeRequest(ctx context.Context, op, method, path string, in any) (*http.Request, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, &Error{Op: op, Kind: ErrInvalidArgument, Err: err}
		}
		body = bytes.NewReader(b)
	}
	req, err := s.PortRequest(ctx, method, CodeInterpreterPort, path, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("User-Agent", userAgent)
	return req, nil
}

// codeError reads a failed answer of the code interpreter into an
// *Error: 404 is ErrNotFound (an unknown context) with the server's text,
// 400 ErrInvalidArgument; a 502 for a port nobody listens on says that
// the sandbox runs no code interpreter (ErrUnavailable), where other
// 502s mean the sandbox is gone (ErrNotRunning).
func codeError(op string, resp *http.Response) *Error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := httpError(op, &http.Response{StatusCode: resp.StatusCode, Body: io.NopCloser(bytes.NewReader(body))})
	var closed struct {
		Port int `json:"port"`
	}
	if resp.StatusCode == http.StatusBadGateway && json.Unmarshal(body, &closed) == nil && closed.Port != 0 {
		e.Kind = ErrUnavailable
		e.Message = fmt.Sprintf("nothing listens on port %d of the sandbox: it runs no code interpreter (make it from a code interpreter template such as %s) or the interpreter died (%s)",
			closed.Port, CodeInterpreterTemplate, e.Message)
	}
	return e
}

// codeCall makes one unary request to the code interpreter, bounded by
// the request timeout, and decodes a JSON answer into out (when not nil).
func (s *Sandbox) codeCall(ctx context.Context, op, method, path string, in, out any) error {
	ctx, cancel := s.client.requestContext(ctx)
	defer cancel()
	req, err := s.codeRequest(ctx, op, method, path, in)
	if err != nil {
		return err
	}
	resp, err := s.client.cfg.HTTPClient.Do(req)
	if err != nil {
		return transportError(op, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return codeError(op, resp)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			if ctx.Err() != nil {
				return transportError(op, err)
			}
			return &Error{Op: op, Message: "malformed response: " + err.Error(), Err: err}
		}
	}
	return nil
}

// errExecutionTimeout is the cause of a RunCode context ended by its
// Timeout.
var errExecutionTimeout = errors.New("execution timeout")

// RunCode runs code in the sandbox's code interpreter and waits for it
// to finish, as E2B's runCode / run_code: in the default context of
// opts.Language (Python when empty), or in opts.Context, whose state
// (variables, imports, working directory) the code sees and changes. The
// sandbox must run a code interpreter on [CodeInterpreterPort] (a sandbox
// of [CodeInterpreterTemplate]); one that does not fails with
// ErrUnavailable.
//
// An error the code raised is not RunCode's failure: it is in the
// returned Execution's Error, and the error is nil. RunCode fails with
// ErrInvalidArgument when both Language and Context are set (before any
// request) or the server refuses the language, ErrNotFound when the
// context does not exist, ErrTimeout when opts.Timeout passes (the
// request is cancelled and the server interrupts the cell; the context
// keeps its state) or ctx's deadline does. When it fails after the
// execution began (a timeout, a broken stream), it returns what arrived
// until then together with the error; otherwise the Execution is nil.
func (s *Sandbox) RunCode(ctx context.Context, code string, opts *RunCodeOptions) (*Execution, error) {
	const op = "run code"
	if opts == nil {
		opts = &RunCodeOptions{}
	}
	if opts.Context != nil && opts.Language != "" {
		return nil, &Error{Op: op, Kind: ErrInvalidArgument, Message: "give a context or a language, not both: a context has its language"}
	}
	body := struct {
		Code      string            `json:"code"`
		ContextID *string           `json:"context_id"`
		Language  *string           `json:"language"`
		EnvVars   map[string]string `json:"env_vars"`
	}{Code: code, EnvVars: opts.Envs}
	if opts.Context != nil {
		body.ContextID = &opts.Context.ID
	}
	if opts.Language != "" {
		body.Language = &opts.Language
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = DefaultCodeTimeout
	}
	rctx, cancel := context.WithCancel(ctx)
	if timeout > 0 {
		rctx, cancel = context.WithTimeoutCause(ctx, timeout, errExecutionTimeout)
	}
	defer cancel()
	// failed explains an error of the exchange: the execution's timeout
	// when it is what ended it.
	failed := func(err error) error {
		if errors.Is(context.Cause(rctx), errExecutionTimeout) && ctx.Err() == nil {
			return &Error{Op: op, Kind: ErrTimeout, Err: context.DeadlineExceeded,
				Message: fmt.Sprintf("execution timed out after %v: the cell was interrupted (RunCodeOptions.Timeout sets the limit)", timeout)}
		}
		return transportError(op, err)
	}

	req, err := s.codeRequest(rctx, op, http.MethodPost, "/execute", body)
	if err != nil {
		return nil, err
	}
	if s.EnvdAccessToken != "" {
		req.Header.Set(envdapi.HeaderAccessToken, s.EnvdAccessToken)
	}
	resp, err := s.client.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, failed(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return nil, codeError(op, resp)
	}
	exec := &Execution{Logs: Logs{Stdout: []string{}, Stderr: []string{}}, Results: []Result{}}
	r := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := readLine(r, maxCodeLine)
		if len(bytes.TrimSpace(line)) > 0 {
			end, perr := exec.apply(line, opts)
			if perr != nil {
				return exec, &Error{Op: op, Message: "malformed execution stream: " + perr.Error(), Err: perr}
			}
			if end {
				// What follows is the response's end: read it, briefly,
				// so that the connection can carry the next request.
				stop := time.AfterFunc(50*time.Millisecond, cancel)
				io.Copy(io.Discard, io.LimitReader(r, 64<<10))
				stop.Stop()
				return exec, nil
			}
		}
		if errors.Is(err, errLineTooLong) {
			return exec, &Error{Op: op, Message: fmt.Sprintf("a line of the execution stream is longer than %d bytes", maxCodeLine)}
		}
		if err == io.EOF {
			return exec, &Error{Op: op, Message: "the execution stream ended before the execution did (the code interpreter stopped?)"}
		}
		if err != nil {
			return exec, failed(err)
		}
	}
}

var errLineTooLong = errors.New("line too long")

// readLine reads one line (without its newline) of at most limit bytes.
// At the end of the stream it returns what was left with io.EOF.
func readLine(r *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > limit {
			return nil, errLineTooLong
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		}
		return line, err
	}
}

// apply adds one line of the execution stream to e, calling opts'
// callbacks; end reports the end of the execution.
func (e *Execution) apply(line []byte, opts *RunCodeOptions) (end bool, err error) {
	var head struct {
		Type           string          `json:"type"`
		Text           string          `json:"text"`
		Timestamp      json.RawMessage `json:"timestamp"`
		Name           string          `json:"name"`
		Value          string          `json:"value"`
		Traceback      json.RawMessage `json:"traceback"`
		ExecutionCount int             `json:"execution_count"`
	}
	if err := json.Unmarshal(line, &head); err != nil {
		return false, err
	}
	switch head.Type {
	case "stdout", "stderr":
		msg := OutputMessage{Line: head.Text, Timestamp: parseTimestamp(head.Timestamp), Error: head.Type == "stderr"}
		if msg.Error {
			e.Logs.Stderr = append(e.Logs.Stderr, head.Text)
			if opts.OnStderr != nil {
				opts.OnStderr(msg)
			}
		} else {
			e.Logs.Stdout = append(e.Logs.Stdout, head.Text)
			if opts.OnStdout != nil {
				opts.OnStdout(msg)
			}
		}
	case "result":
		var r Result
		if err := json.Unmarshal(line, &r); err != nil {
			return false, err
		}
		e.Results = append(e.Results, r)
		if opts.OnResult != nil {
			opts.OnResult(r)
		}
	case "error":
		x := ExecutionError{Name: head.Name, Value: head.Value, Traceback: traceback(head.Traceback)}
		e.Error = &x
		if opts.OnError != nil {
			opts.OnError(x)
		}
	case "number_of_executions":
		e.ExecutionCount = head.ExecutionCount
	case "end_of_execution":
		return true, nil
	}
	// Other types (a newer server's) are skipped, as E2B's SDKs do.
	return false, nil
}

// traceback reads a traceback sent as one string or, by older servers,
// as a list of lines.
func traceback(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var lines []string
	if json.Unmarshal(raw, &lines) == nil {
		return strings.Join(lines, "\n")
	}
	return ""
}

// parseTimestamp reads an ISO 8601 time, or a Unix time as a number in
// seconds, milliseconds, microseconds or nanoseconds (servers differ),
// told apart by its size; zero when neither.
func parseTimestamp(raw json.RawMessage) time.Time {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999Z07:00"} {
			if t, err := time.Parse(layout, s); err == nil {
				return t
			}
		}
		return time.Time{}
	}
	var n json.Number
	if json.Unmarshal(raw, &n) != nil {
		return time.Time{}
	}
	if i, err := strconv.ParseInt(n.String(), 10, 64); err == nil {
		switch {
		case i < 1e11: // seconds until the year 5138
			return time.Unix(i, 0)
		case i < 1e14:
			return time.UnixMilli(i)
		case i < 1e17:
			return time.UnixMicro(i)
		}
		return time.Unix(0, i)
	}
	f, err := strconv.ParseFloat(n.String(), 64)
	if err != nil || f < 0 || f >= 1e11 {
		return time.Time{}
	}
	sec := math.Floor(f)
	return time.Unix(int64(sec), int64((f-sec)*1e9))
}

// CreateCodeContext makes a new context in the sandbox's code
// interpreter: a kernel of language (empty means Python) whose working
// directory is cwd (empty means the user's home, /home/user). Pass it as
// RunCodeOptions.Context. It fails with ErrInvalidArgument for a language
// the server refuses, and ErrRateLimit when the interpreter runs as many
// contexts as it allows (code-interpreter-v1: 16; remove one first).
func (s *Sandbox) CreateCodeContext(ctx context.Context, language, cwd string) (*CodeContext, error) {
	in := struct {
		Language *string `json:"language"`
		Cwd      *string `json:"cwd"`
	}{}
	if language != "" {
		in.Language = &language
	}
	if cwd != "" {
		in.Cwd = &cwd
	}
	var out CodeContext
	if err := s.codeCall(ctx, "create code context", http.MethodPost, "/contexts", in, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListCodeContexts returns the contexts of the sandbox's code
// interpreter, the default ones included.
func (s *Sandbox) ListCodeContexts(ctx context.Context) ([]CodeContext, error) {
	var out []CodeContext
	if err := s.codeCall(ctx, "list code contexts", http.MethodGet, "/contexts", nil, &out); err != nil {
		return nil, err
	}
	if out == nil {
		out = []CodeContext{}
	}
	return out, nil
}

// RestartCodeContext restarts the kernel of context id: its state
// (variables, imports) is lost, its id stays. ErrNotFound when there is
// no such context.
func (s *Sandbox) RestartCodeContext(ctx context.Context, id string) error {
	return s.codeCall(ctx, "restart code context "+id, http.MethodPost, "/contexts/"+url.PathEscape(id)+"/restart", nil, nil)
}

// RemoveCodeContext stops the kernel of context id and forgets it.
// ErrNotFound when there is no such context.
func (s *Sandbox) RemoveCodeContext(ctx context.Context, id string) error {
	return s.codeCall(ctx, "remove code context "+id, http.MethodDelete, "/contexts/"+url.PathEscape(id), nil, nil)
}
