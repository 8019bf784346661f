// Package platform is Hutch as an MCP server: tools that create sandboxes,
// run commands in them and read and edit their files, for MCP clients
// (Claude Code, Cursor, agents on the MCP SDKs). It is built on the
// official MCP Go SDK and talks to `hutch serve` through Hutch's Go SDK,
// so it runs next to the server or anywhere that can reach it.
//
// The tools carry the names of OpenSandbox's MCP server too, and take
// its arguments as well as Hutch's (opensandbox.go says how).
//
// Every tool fails by returning a tool result with isError set and a
// message a model can act on, never a protocol error. Which API key (and
// so which sandboxes) a call acts with is decided per call by
// [Options.Client]: one fixed key on stdio, the caller's bearer token over
// HTTP (see [NewHTTPHandler]).
package platform

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutch-sandbox/hutch/sdk"
)

// MetadataKey marks the sandboxes created through MCP (value "true"), so
// that they can be listed and told apart.
const MetadataKey = "hutch.mcp"

// Options configure the server.
type Options struct {
	// Client returns the Hutch client a tool call acts with.
	Client func(ctx context.Context, req *mcp.CallToolRequest) (*sdk.Client, error)
	// IdleTimeout, if not zero, is the life of a sandbox created through
	// MCP that no tool touches: sandboxes start with it (unless the call
	// asks for more) and every tool call on a sandbox extends its life to
	// at least this long from then. A sandbox an agent forgot dies
	// IdleTimeout after its last use.
	IdleTimeout time.Duration
	// Version is reported as the server's version.
	Version string
	// Logger logs failures; nil discards.
	Logger *slog.Logger
}

// Server holds the tools' shared state.
type Server struct {
	opts Options
	log  *slog.Logger
}

// NewServer returns the MCP server with every platform tool.
func NewServer(opts Options) *mcp.Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	s := &Server{opts: opts, log: opts.Logger}
	srv := mcp.NewServer(&mcp.Implementation{Name: "hutch", Title: "Hutch sandboxes", Version: opts.Version}, &mcp.ServerOptions{
		Instructions: instructions,
		Logger:       opts.Logger,
	})
	s.addSandboxTools(srv)
	s.addLifecycleTools(srv)
	s.addCommandTools(srv)
	s.addFileTools(srv)
	s.addCodeTools(srv)
	srv.AddReceivingMiddleware(s.reportCalls, dropNulls)
	return srv
}

// instructions tell a model how the tools fit together.
const instructions = `Hutch runs isolated Linux sandboxes (Debian with bash, python3, node, git, curl).
Create one with sandbox_create and pass its sandbox_id to every other tool.
Run shell commands with command_run (bounded output, exit code returned); start long-running ones with command_start and poll command_output.
Read and change files with the file_* tools; prefer file_edit for small exact changes.
Run Python (or javascript, typescript, bash) in a notebook-like context whose state lasts between calls with run_code, in a sandbox made with template code-interpreter-v1; create_code_context gives a context of its own.
Relative paths are relative to /home/user. Kill sandboxes you no longer need with sandbox_kill.
The tools also take the arguments of OpenSandbox's MCP server (opensandbox-mcp): image, env, resource, network_policy, entrypoint; paths and entries lists; range_header; mode, owner and group; background and working_directory; execution_id; filter. Each tool's description says what such a call returns.`

// client is the Hutch client of a call.
func (s *Server) client(ctx context.Context, req *mcp.CallToolRequest) (*sdk.Client, error) {
	c, err := s.opts.Client(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("no access to Hutch: %w", err)
	}
	return c, nil
}

// sandbox returns a handle on sandbox id for a tool call, extending its
// life by the idle timeout when there is one.
func (s *Server) sandbox(ctx context.Context, req *mcp.CallToolRequest, id string) (*sdk.Sandbox, error) {
	if id == "" {
		return nil, errors.New("sandbox_id is required: create a sandbox with sandbox_create or find one with sandbox_list")
	}
	c, err := s.client(ctx, req)
	if err != nil {
		return nil, err
	}
	// Connect never shortens a sandbox's life: one second asks for nothing.
	extend := time.Second
	if s.opts.IdleTimeout > 0 {
		extend = s.opts.IdleTimeout
	}
	sbx, err := c.Connect(ctx, id, sdk.ConnectOptions{Timeout: extend})
	if err != nil {
		return nil, explain(err, id)
	}
	return sbx, nil
}

// explain turns the errors of calls about a whole sandbox into messages a
// model can act on.
func explain(err error, sandboxID string) error {
	if errors.Is(err, sdk.ErrNotFound) {
		return fmt.Errorf("sandbox %s not found (it was killed or timed out; sandbox_list shows the live ones)", sandboxID)
	}
	return opFailed(err, sandboxID)
}

// opFailed explains the errors of calls inside a sandbox: a file that is
// not found stays "not found", a sandbox that died is said so.
func opFailed(err error, sandboxID string) error {
	switch {
	case errors.Is(err, sdk.ErrNotRunning):
		return fmt.Errorf("sandbox %s is not running any more (it was killed or timed out)", sandboxID)
	case errors.Is(err, sdk.ErrAuthentication):
		return fmt.Errorf("not allowed: %w", err)
	}
	return err
}

// hint builds tool annotations; title is shown to users.
func hint(title string, readOnly, destructive, idempotent bool) *mcp.ToolAnnotations {
	return &mcp.ToolAnnotations{Title: title, ReadOnlyHint: readOnly, DestructiveHint: &destructive, IdempotentHint: idempotent, OpenWorldHint: ptr(false)}
}

func ptr[T any](v T) *T { return &v }

// addTool registers a typed tool, with its schemas inferred from In and
// Out as the SDK would, but naming one type per value: the inference makes
// slices, maps and pointers ["null", T], which some clients' function
// calling rejects (Inspector's --strict flags it), and an absent field
// already says "not given".
func addTool[In, Out any](srv *mcp.Server, t *mcp.Tool, h mcp.ToolHandlerFor[In, Out]) {
	for _, s := range []struct {
		field *any
		infer func() (*jsonschema.Schema, error)
	}{
		{&t.InputSchema, func() (*jsonschema.Schema, error) { return jsonschema.For[In](nil) }},
		{&t.OutputSchema, func() (*jsonschema.Schema, error) { return jsonschema.For[Out](nil) }},
	} {
		schema, err := s.infer()
		if err != nil {
			panic(fmt.Sprintf("tool %s: %v", t.Name, err)) // a programming error, found by any test
		}
		singleTypes(schema)
		*s.field = schema
	}
	mcp.AddTool(srv, t, h)
}

// singleTypes turns every ["null", T] in s into T.
func singleTypes(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	if len(s.Types) == 2 && (s.Types[0] == "null" || s.Types[1] == "null") {
		t := s.Types[0]
		if t == "null" {
			t = s.Types[1]
		}
		s.Type, s.Types = t, nil
	}
	for _, p := range s.Properties {
		singleTypes(p)
	}
	singleTypes(s.Items)
	singleTypes(s.AdditionalProperties)
	for _, p := range s.PrefixItems {
		singleTypes(p)
	}
}
