package platform

import (
	"context"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutch-sandbox/hutch/sdk"
)

// PauseInput is sandbox_pause's input.
type PauseInput struct {
	SandboxID  string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	KeepMemory *bool  `json:"keep_memory,omitempty" jsonschema:"true (default) freezes every process in place, memory kept; false keeps only the files and stops every process"`
}

// PauseOutput is sandbox_pause's output.
type PauseOutput struct {
	Paused bool `json:"paused" jsonschema:"false when the sandbox was paused already"`
}

// ResumeInput is sandbox_resume's input.
type ResumeInput struct {
	SandboxID      string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"lifetime once resumed, in seconds; default 300"`
	Reboot         bool   `json:"reboot,omitempty" jsonschema:"boot it again on its files even if it kept its memory"`
}

// SnapshotInput is sandbox_snapshot's input.
type SnapshotInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Name      string `json:"name,omitempty" jsonschema:"the snapshot's template name (lower-case letters, digits, '.', '_', '-'); default snapshot-<random>"`
}

// SnapshotOutput is sandbox_snapshot's output.
type SnapshotOutput struct {
	SnapshotID string   `json:"snapshot_id" jsonschema:"pass it as template to sandbox_create to start from these files"`
	Names      []string `json:"names"`
}

// ForkInput is sandbox_fork's input.
type ForkInput struct {
	SandboxID      string `json:"sandbox_id" jsonschema:"the sandbox to fork"`
	Count          *int   `json:"count,omitempty" jsonschema:"how many forks, 1 to 100; default 1"`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"each fork's lifetime in seconds; default 300"`
}

// ForkOutput is sandbox_fork's output.
type ForkOutput struct {
	Sandboxes []string `json:"sandboxes" jsonschema:"the forks' sandbox ids"`
	Errors    []string `json:"errors,omitempty" jsonschema:"why each fork that could not be made failed"`
}

func (s *Server) addLifecycleTools(srv *mcp.Server) {
	addTool(srv, &mcp.Tool{
		Name:        "sandbox_pause",
		Description: "Pause a sandbox until sandbox_resume: by default every process is frozen in place with its memory; with keep_memory false only its files are kept. It does not expire while paused.",
		Annotations: hint("Pause sandbox", false, false, true),
	}, s.pause)
	addTool(srv, &mcp.Tool{
		Name:        "sandbox_resume",
		Description: "Resume a paused sandbox (a running one just lives on): its processes go on where they were, or, paused without memory, it boots again on its files. Returns its details.",
		Annotations: hint("Resume sandbox", false, false, true),
	}, s.resume)
	addTool(srv, &mcp.Tool{
		Name:        "sandbox_snapshot",
		Description: "Snapshot a sandbox's files (it is frozen only while they are captured, then runs on); sandbox_create with template set to the snapshot_id starts new sandboxes from them.",
		Annotations: hint("Snapshot sandbox", false, false, false),
	}, s.snapshot)
	addTool(srv, &mcp.Tool{
		Name:        "sandbox_fork",
		Description: "Make count new sandboxes from a sandbox's files, each independent (to try alternatives); the source runs on unchanged. Returns the forks' sandbox ids.",
		Annotations: hint("Fork sandbox", false, false, false),
	}, s.fork)
}

func (s *Server) pause(ctx context.Context, req *mcp.CallToolRequest, in PauseInput) (*mcp.CallToolResult, PauseOutput, error) {
	c, err := s.client(ctx, req)
	if err != nil {
		return nil, PauseOutput{}, err
	}
	keep := in.KeepMemory == nil || *in.KeepMemory
	paused, err := c.Pause(ctx, in.SandboxID, sdk.PauseOptions{Filesystem: !keep})
	if err != nil {
		return nil, PauseOutput{}, explain(err, in.SandboxID)
	}
	return nil, PauseOutput{Paused: paused}, nil
}

func (s *Server) resume(ctx context.Context, req *mcp.CallToolRequest, in ResumeInput) (*mcp.CallToolResult, SandboxInfo, error) {
	timeout, err := timeoutOf(in.TimeoutSeconds)
	if err != nil {
		return nil, SandboxInfo{}, err
	}
	sbx, err := s.connectSandbox(ctx, req, in.SandboxID, timeout, in.Reboot)
	if err != nil {
		return nil, SandboxInfo{}, err
	}
	info, err := sbx.GetInfo(ctx)
	if err != nil {
		return nil, SandboxInfo{}, explain(err, in.SandboxID)
	}
	return nil, infoOf(info), nil
}

// timeoutOf checks a timeout_seconds argument in whole seconds; 0 means
// "not given".
func timeoutOf(secs int) (time.Duration, error) {
	return seconds("timeout_seconds", float64(secs), MaxTimeout)
}

func (s *Server) snapshot(ctx context.Context, req *mcp.CallToolRequest, in SnapshotInput) (*mcp.CallToolResult, SnapshotOutput, error) {
	c, err := s.client(ctx, req)
	if err != nil {
		return nil, SnapshotOutput{}, err
	}
	snap, err := c.CreateSnapshot(ctx, in.SandboxID, sdk.SnapshotOptions{Name: in.Name})
	if err != nil {
		return nil, SnapshotOutput{}, explain(err, in.SandboxID)
	}
	return nil, SnapshotOutput{SnapshotID: snap.ID, Names: snap.Names}, nil
}

func (s *Server) fork(ctx context.Context, req *mcp.CallToolRequest, in ForkInput) (*mcp.CallToolResult, ForkOutput, error) {
	c, err := s.client(ctx, req)
	if err != nil {
		return nil, ForkOutput{}, err
	}
	timeout, err := timeoutOf(in.TimeoutSeconds)
	if err != nil {
		return nil, ForkOutput{}, err
	}
	if timeout == 0 && s.opts.IdleTimeout > 0 {
		timeout = s.opts.IdleTimeout
	}
	count := 1
	if in.Count != nil {
		count = *in.Count
	}
	if count < 1 || count > 100 {
		return nil, ForkOutput{}, fmt.Errorf("count must be from 1 to 100, got %d", count)
	}
	forks, err := c.Fork(ctx, in.SandboxID, sdk.ForkOptions{Count: count, Timeout: timeout})
	if err != nil {
		return nil, ForkOutput{}, explain(err, in.SandboxID)
	}
	out := ForkOutput{Sandboxes: []string{}}
	for _, f := range forks {
		if f.Err != nil {
			out.Errors = append(out.Errors, f.Err.Error())
			continue
		}
		out.Sandboxes = append(out.Sandboxes, f.Sandbox.ID)
	}
	return nil, out, nil
}
