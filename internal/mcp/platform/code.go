package platform

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutch-sandbox/hutch/sdk"
)

// RunCodeInput is run_code's input.
type RunCodeInput struct {
	SandboxID      string            `json:"sandbox_id" jsonschema:"the sandbox's id; it must run a code interpreter: create it with sandbox_create and template code-interpreter-v1"`
	Code           string            `json:"code" jsonschema:"the code to run, as one notebook cell: the value of its last expression is the main result"`
	Language       string            `json:"language,omitempty" jsonschema:"python (default), javascript, typescript or bash: runs in that language's default context. Not with context_id"`
	ContextID      string            `json:"context_id,omitempty" jsonschema:"run in this context (from create_code_context), with its own state and working directory. Not with language"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" jsonschema:"interrupt the code after this many seconds (the context keeps its state); default 60, at most 3600"`
	Envs           map[string]string `json:"envs,omitempty" jsonschema:"environment variables for this execution"`
	MaxOutputBytes int               `json:"max_output_bytes,omitempty" jsonschema:"keep at most this many bytes of stdout, of stderr and of each text format of a result (the start and the end); default 32768"`
}

// RunCodeOutput is what code produced.
type RunCodeOutput struct {
	Stdout         string       `json:"stdout"`
	Stderr         string       `json:"stderr"`
	Text           string       `json:"text,omitempty" jsonschema:"the main result's text: the value of the code's last expression, as the language shows it"`
	Results        []CodeResult `json:"results" jsonschema:"every result: display data (plots, tables) and the main result, in order"`
	Error          *CodeError   `json:"error,omitempty" jsonschema:"the error the code raised; the call is then an error result"`
	ExecutionCount int          `json:"execution_count,omitempty" jsonschema:"the context's execution counter after this run"`
	TimedOut       bool         `json:"timed_out,omitempty" jsonschema:"the code ran past timeout_seconds and was interrupted; output is what came before"`
	Truncated      bool         `json:"truncated,omitempty" jsonschema:"some output or result text was cut to max_output_bytes; the middle is left out"`
}

// CodeResult is one result of code, its text formats bounded; images are
// attached to the tool result as image content.
type CodeResult struct {
	IsMainResult bool              `json:"is_main_result" jsonschema:"the value of the code's last expression (else display data)"`
	Formats      []string          `json:"formats" jsonschema:"the formats the result has: text, html, markdown, svg, png, jpeg, pdf, latex, json, javascript, data, chart, or a MIME type"`
	Text         string            `json:"text,omitempty"`
	HTML         string            `json:"html,omitempty"`
	Markdown     string            `json:"markdown,omitempty"`
	SVG          string            `json:"svg,omitempty"`
	LaTeX        string            `json:"latex,omitempty"`
	JavaScript   string            `json:"javascript,omitempty"`
	JSON         map[string]any    `json:"json,omitempty" jsonschema:"a JSON object the code displayed (a JSON value that is no object is in extra, as application/json)"`
	Data         map[string]any    `json:"data,omitempty" jsonschema:"a dataframe's data: its columns, each a list of values"`
	Chart        map[string]any    `json:"chart,omitempty" jsonschema:"the chart extracted from a plot: type, title, axes, elements"`
	Extra        map[string]any    `json:"extra,omitempty" jsonschema:"formats of other MIME types"`
	Attached     map[string]string `json:"attached,omitempty" jsonschema:"binary formats (png, jpeg, pdf) and where they are: the index of the tool result's content item holding them"`
}

// CodeError is an error the code raised.
type CodeError struct {
	Name      string `json:"name" jsonschema:"the error's type, e.g. ZeroDivisionError"`
	Value     string `json:"value" jsonschema:"its message"`
	Traceback string `json:"traceback" jsonschema:"the traceback, without terminal colours"`
}

// CodeContextInput is create_code_context's input.
type CodeContextInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id (a code interpreter sandbox, template code-interpreter-v1)"`
	Language  string `json:"language,omitempty" jsonschema:"python (default), javascript, typescript or bash"`
	Cwd       string `json:"cwd,omitempty" jsonschema:"the context's working directory; default /home/user"`
}

// CodeContextOutput names a context.
type CodeContextOutput struct {
	ContextID string `json:"context_id" jsonschema:"pass to run_code"`
	Language  string `json:"language"`
	Cwd       string `json:"cwd"`
}

func (s *Server) addCodeTools(srv *mcp.Server) {
	addTool(srv, &mcp.Tool{
		Name: "run_code",
		Description: "Run code in a code interpreter sandbox (sandbox_create with template code-interpreter-v1) as a notebook cell, and wait for it (up to timeout_seconds, default 60). " +
			"State lasts between calls: variables, imports and functions stay in the context (the language's default one, or context_id from create_code_context). " +
			"Returns stdout, stderr, text (the value of the last expression) and every result with its formats; plots and images come as image content. " +
			"An error the code raises makes the result an error result, with the error's name, value and traceback (the context keeps its state).",
		Annotations: hint("Run code", false, true, false),
	}, s.runCode)
	addTool(srv, &mcp.Tool{
		Name:        "create_code_context",
		Description: "Create a new context in a code interpreter sandbox: a kernel of its own (python, javascript, typescript or bash) with its own state and working directory. Returns its context_id, for run_code.",
		Annotations: hint("Create code context", false, false, false),
	}, s.createCodeContext)
}

func (s *Server) runCode(ctx context.Context, req *mcp.CallToolRequest, in RunCodeInput) (*mcp.CallToolResult, RunCodeOutput, error) {
	if strings.TrimSpace(in.Code) == "" {
		return nil, RunCodeOutput{}, errors.New("code is empty")
	}
	if in.Language != "" && in.ContextID != "" {
		return nil, RunCodeOutput{}, errors.New("give language or context_id, not both: a context has its language")
	}
	timeout := DefaultCommandTimeout
	if in.TimeoutSeconds != 0 {
		timeout = time.Duration(in.TimeoutSeconds) * time.Second
		if in.TimeoutSeconds < 0 || timeout > MaxCommandTimeout {
			return nil, RunCodeOutput{}, fmt.Errorf("timeout_seconds must be between 1 and %d", int(MaxCommandTimeout/time.Second))
		}
	}
	limit, err := outputLimit(in.MaxOutputBytes)
	if err != nil {
		return nil, RunCodeOutput{}, err
	}
	sbx, err := s.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return nil, RunCodeOutput{}, err
	}
	opts := &sdk.RunCodeOptions{Language: in.Language, Envs: in.Envs, Timeout: timeout}
	if in.ContextID != "" {
		opts.Context = &sdk.CodeContext{ID: in.ContextID}
	}
	exec, err := sbx.RunCode(ctx, in.Code, opts)
	timedOut := errors.Is(err, sdk.ErrTimeout) && ctx.Err() == nil && exec != nil
	if err != nil && !timedOut {
		return nil, RunCodeOutput{}, codeFailed(err, in)
	}
	// An error or a timeout is said first, before the output's JSON.
	lead := 0
	if timedOut || exec.Error != nil {
		lead = 1
	}
	attached, out := codeResult(exec, limit, lead)
	text, _ := json.Marshal(out)
	res := &mcp.CallToolResult{Content: append([]mcp.Content{&mcp.TextContent{Text: string(text)}}, attached...)}
	switch {
	case timedOut:
		out.TimedOut = true
		res.IsError = true
		text, _ = json.Marshal(out)
		res.Content[0] = &mcp.TextContent{Text: string(text)}
		res.Content = append([]mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(
			"the code ran past %d seconds and was interrupted; its context keeps its state (the output so far follows; raise timeout_seconds for longer work)", int(timeout/time.Second))}}, res.Content...)
	case out.Error != nil:
		res.IsError = true
		res.Content = append([]mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("the code raised %s: %s\n%s", out.Error.Name, out.Error.Value, out.Error.Traceback)}}, res.Content...)
	}
	return res, out, nil
}

// codeFailed explains RunCode's failures (the sandbox was found).
func codeFailed(err error, in RunCodeInput) error {
	switch {
	case errors.Is(err, sdk.ErrNotFound) && in.ContextID != "":
		return fmt.Errorf("no context %s in sandbox %s (create_code_context makes one; without context_id the language's default context is used): %w", in.ContextID, in.SandboxID, err)
	case errors.Is(err, sdk.ErrInvalidArgument) && in.Language != "":
		return fmt.Errorf("language %q refused (python, javascript, typescript and bash are known): %w", in.Language, err)
	}
	return opFailed(err, in.SandboxID)
}

// ansi matches terminal colour and cursor sequences, which kernels put in
// tracebacks.
var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`)

// codeResult is exec as run_code returns it: the structured output, and
// the results' binary formats (images as image content, PDFs as embedded
// resources) that follow the output's JSON text in the tool result's
// content, after lead other items; the output names each by its index.
func codeResult(exec *sdk.Execution, limit, lead int) (attached []mcp.Content, out RunCodeOutput) {
	out = RunCodeOutput{Results: []CodeResult{}}
	cut := func(s string) string {
		b := newBounded(limit)
		b.Write([]byte(s))
		if b.cut > 0 {
			out.Truncated = true
		}
		return b.String()
	}
	out.Stdout = cut(strings.Join(exec.Logs.Stdout, ""))
	out.Stderr = cut(strings.Join(exec.Logs.Stderr, ""))
	out.Text = cut(exec.Text())
	out.ExecutionCount = exec.ExecutionCount
	if e := exec.Error; e != nil {
		out.Error = &CodeError{Name: e.Name, Value: e.Value, Traceback: cut(ansi.ReplaceAllString(e.Traceback, ""))}
	}
	// The JSON text is content item lead; what is attached follows it.
	attach := func(c mcp.Content) string { attached = append(attached, c); return fmt.Sprint(lead + len(attached)) }
	for i, r := range exec.Results {
		cr := CodeResult{IsMainResult: r.IsMainResult, Formats: r.Formats(),
			Text: cut(r.Text), HTML: cut(r.HTML), Markdown: cut(r.Markdown), SVG: cut(r.SVG), LaTeX: cut(r.LaTeX), JavaScript: cut(r.JavaScript),
			Data: object(r.Data), Chart: object(r.Chart)}
		if cr.Formats == nil {
			cr.Formats = []string{}
		}
		// Object-typed fields keep the tool's output schema typed (MCP
		// clients check it); any other JSON value goes to extra.
		if cr.JSON = object(r.JSON); cr.JSON == nil && len(r.JSON) > 0 {
			cr.Extra = map[string]any{"application/json": rawValue(r.JSON)}
		}
		for k, v := range r.Extra {
			if cr.Extra == nil {
				cr.Extra = map[string]any{}
			}
			cr.Extra[k] = rawValue(v)
		}
		for _, bin := range []struct{ name, mime, b64 string }{
			{"png", "image/png", r.PNG}, {"jpeg", "image/jpeg", r.JPEG}, {"pdf", "application/pdf", r.PDF},
		} {
			if bin.b64 == "" {
				continue
			}
			data, err := base64.StdEncoding.DecodeString(strings.TrimSpace(bin.b64))
			if err != nil {
				cr.Extra = withExtra(cr.Extra, bin.name, "not base64: "+err.Error())
				continue
			}
			var c mcp.Content = &mcp.ImageContent{Data: data, MIMEType: bin.mime}
			if bin.name == "pdf" {
				c = &mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: fmt.Sprintf("result:%d.pdf", i), MIMEType: bin.mime, Blob: data}}
			}
			if cr.Attached == nil {
				cr.Attached = map[string]string{}
			}
			cr.Attached[bin.name] = "content[" + attach(c) + "]"
		}
		out.Results = append(out.Results, cr)
	}
	return attached, out
}

func withExtra(m map[string]any, k string, v any) map[string]any {
	if m == nil {
		m = map[string]any{}
	}
	m[k] = v
	return m
}

// rawValue decodes JSON the interpreter sent; nil for none.
// object is raw as a JSON object, nil when it is none.
func object(raw json.RawMessage) map[string]any {
	var m map[string]any
	if len(raw) == 0 || json.Unmarshal(raw, &m) != nil {
		return nil
	}
	return m
}

func rawValue(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	return v
}

func (s *Server) createCodeContext(ctx context.Context, req *mcp.CallToolRequest, in CodeContextInput) (*mcp.CallToolResult, CodeContextOutput, error) {
	sbx, err := s.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return nil, CodeContextOutput{}, err
	}
	c, err := sbx.CreateCodeContext(ctx, in.Language, in.Cwd)
	if err != nil {
		if errors.Is(err, sdk.ErrInvalidArgument) && in.Language != "" {
			return nil, CodeContextOutput{}, fmt.Errorf("language %q refused (python, javascript, typescript and bash are known): %w", in.Language, err)
		}
		return nil, CodeContextOutput{}, opFailed(err, in.SandboxID)
	}
	return nil, CodeContextOutput{ContextID: c.ID, Language: c.Language, Cwd: c.Cwd}, nil
}
