package platform

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutch-sandbox/hutch/sdk"
)

// Output bounds of command tools: a model's context is precious, and a
// command may print without end.
const (
	// DefaultMaxOutput is how much of each stream command_run and
	// command_output return when the call sets no max_output_bytes.
	DefaultMaxOutput = 32 << 10
	// MaxOutput is the largest max_output_bytes a call may ask for.
	MaxOutput = 1 << 20
	// DefaultCommandTimeout bounds command_run when the call sets none.
	DefaultCommandTimeout = 60 * time.Second
	// MaxCommandTimeout is the longest command_run may wait.
	MaxCommandTimeout = time.Hour
)

// RunInput is command_run's input.
type RunInput struct {
	SandboxID      string            `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Command        string            `json:"command" jsonschema:"shell command, run with bash -l -c"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"working directory; default the user's home (/home/user)"`
	Envs           map[string]string `json:"envs,omitempty" jsonschema:"extra environment variables"`
	User           string            `json:"user,omitempty" jsonschema:"run as this user of the sandbox: user (default) or root"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" jsonschema:"kill the command after this many seconds; default 60, at most 3600. Use command_start for longer work"`
	MaxOutputBytes int               `json:"max_output_bytes,omitempty" jsonschema:"keep at most this many bytes of stdout and of stderr (the start and the end); default 32768"`
}

// RunOutput is how a command ended.
type RunOutput struct {
	ExitCode  int    `json:"exit_code" jsonschema:"the command's exit status; -1 when it was killed"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	TimedOut  bool   `json:"timed_out,omitempty" jsonschema:"the command ran past its timeout and was killed"`
	Truncated bool   `json:"truncated,omitempty" jsonschema:"output was cut to max_output_bytes; the middle is left out"`
}

// StartInput is command_start's input.
type StartInput struct {
	SandboxID string            `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Command   string            `json:"command" jsonschema:"shell command, run with bash -l -c in the background"`
	Cwd       string            `json:"cwd,omitempty" jsonschema:"working directory; default the user's home"`
	Envs      map[string]string `json:"envs,omitempty" jsonschema:"extra environment variables"`
	User      string            `json:"user,omitempty" jsonschema:"run as this user: user (default) or root"`
}

// StartOutput names a background command.
type StartOutput struct {
	CommandID string `json:"command_id" jsonschema:"pass to command_output and command_interrupt"`
	PID       uint32 `json:"pid"`
}

// OutputInput is command_output's input.
type OutputInput struct {
	SandboxID      string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	CommandID      string `json:"command_id" jsonschema:"from command_start"`
	MaxOutputBytes int    `json:"max_output_bytes,omitempty" jsonschema:"keep at most this many bytes of each stream (the end); default 32768"`
}

// OutputOutput is a background command's state and output so far.
type OutputOutput struct {
	Running   bool   `json:"running"`
	ExitCode  *int   `json:"exit_code,omitempty" jsonschema:"set once the command has ended; -1 when it was killed"`
	Stdout    string `json:"stdout" jsonschema:"everything printed so far (or its end, when truncated)"`
	Stderr    string `json:"stderr"`
	Truncated bool   `json:"truncated,omitempty"`
}

// InterruptInput is command_interrupt's input.
type InterruptInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	CommandID string `json:"command_id" jsonschema:"from command_start"`
	Force     bool   `json:"force,omitempty" jsonschema:"send SIGKILL instead of SIGTERM"`
}

// InterruptOutput says what was done.
type InterruptOutput struct {
	Signal string `json:"signal"`
}

func (s *Server) addCommandTools(srv *mcp.Server) {
	addTool(srv, &mcp.Tool{
		Name:        "command_run",
		Description: "Run a shell command in a sandbox and wait for it (up to timeout_seconds, default 60). Returns exit_code, stdout and stderr; long output keeps its start and end. A non-zero exit code is a normal result, not an error.",
		Annotations: hint("Run command", false, true, false),
	}, s.run)
	addTool(srv, &mcp.Tool{
		Name:        "command_start",
		Description: "Start a shell command in the background (servers, builds, anything longer than a minute) and return its command_id at once. Follow it with command_output; stop it with command_interrupt.",
		Annotations: hint("Start command", false, true, false),
	}, s.start)
	addTool(srv, &mcp.Tool{
		Name:        "command_output",
		Description: "State and output so far of a command started with command_start: whether it still runs, its exit code once ended, and its stdout and stderr.",
		Annotations: hint("Command output", true, false, true),
	}, s.output)
	addTool(srv, &mcp.Tool{
		Name:        "command_interrupt",
		Description: "Stop a command started with command_start: SIGTERM to it and its children, or SIGKILL with force.",
		Annotations: hint("Interrupt command", false, true, true),
	}, s.interrupt)
}

func (s *Server) run(ctx context.Context, req *mcp.CallToolRequest, in RunInput) (*mcp.CallToolResult, RunOutput, error) {
	if strings.TrimSpace(in.Command) == "" {
		return nil, RunOutput{}, errors.New("command is empty")
	}
	timeout := DefaultCommandTimeout
	if in.TimeoutSeconds != 0 {
		timeout = time.Duration(in.TimeoutSeconds) * time.Second
		if in.TimeoutSeconds < 0 || timeout > MaxCommandTimeout {
			return nil, RunOutput{}, fmt.Errorf("timeout_seconds must be between 1 and %d; use command_start for longer work", int(MaxCommandTimeout/time.Second))
		}
	}
	limit, err := outputLimit(in.MaxOutputBytes)
	if err != nil {
		return nil, RunOutput{}, err
	}
	sbx, err := s.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return nil, RunOutput{}, err
	}
	stdout, stderr := newBounded(limit), newBounded(limit)
	res, err := sbx.Commands.Run(ctx, in.Command, &sdk.RunOptions{
		Cwd: in.Cwd, Envs: in.Envs, User: in.User, Timeout: timeout, Stdout: stdout, Stderr: stderr,
	})
	out := RunOutput{Stdout: stdout.String(), Stderr: stderr.String(), Truncated: stdout.cut > 0 || stderr.cut > 0}
	var exit *sdk.CommandExitError
	switch {
	case err == nil:
		out.ExitCode = res.ExitCode
	case errors.As(err, &exit):
		out.ExitCode = exit.ExitCode
	case errors.Is(err, sdk.ErrTimeout) && ctx.Err() == nil:
		out.ExitCode, out.TimedOut = -1, true
	default:
		return nil, RunOutput{}, opFailed(err, in.SandboxID)
	}
	return nil, out, nil
}

func outputLimit(n int) (int, error) {
	switch {
	case n == 0:
		return DefaultMaxOutput, nil
	case n < 0 || n > MaxOutput:
		return 0, fmt.Errorf("max_output_bytes must be between 1 and %d, got %d", MaxOutput, n)
	}
	return n, nil
}

// jobDir is where background command id keeps its output, inside the
// sandbox: state lives with the sandbox, so command_output works from any
// `hutch mcp` process (HTTP replicas, restarts). A directory per command,
// with no shared parent, so commands of different users never collide.
func jobDir(id string) string { return "/tmp/.hutch-mcp-" + id }

// jobScript runs the command in $HUTCH_MCP_CMD (never spliced into the
// script, so no quoting can break out) with its output in files, and
// records its exit status.
const jobScript = `d=$HUTCH_MCP_DIR; c=$HUTCH_MCP_CMD; unset HUTCH_MCP_DIR HUTCH_MCP_CMD
mkdir -p "$d" && echo $$ > "$d/pid" || exit 1
bash -c "$c" > "$d/stdout" 2> "$d/stderr" < /dev/null
echo $? > "$d/exit"`

func (s *Server) start(ctx context.Context, req *mcp.CallToolRequest, in StartInput) (*mcp.CallToolResult, StartOutput, error) {
	if strings.TrimSpace(in.Command) == "" {
		return nil, StartOutput{}, errors.New("command is empty")
	}
	sbx, err := s.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return nil, StartOutput{}, err
	}
	id := newCommandID()
	envs := map[string]string{}
	maps.Copy(envs, in.Envs)
	envs["HUTCH_MCP_CMD"], envs["HUTCH_MCP_DIR"] = in.Command, jobDir(id)
	h, err := sbx.Commands.Start(ctx, jobScript, &sdk.RunOptions{
		Cwd: in.Cwd, Envs: envs, User: in.User, Timeout: sdk.NoTimeout, Tag: tagOf(id),
	})
	if err != nil {
		return nil, StartOutput{}, opFailed(err, in.SandboxID)
	}
	h.Disconnect() // it runs on; command_output reads its files
	return nil, StartOutput{CommandID: id, PID: h.PID}, nil
}

func newCommandID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "cmd_" + hex.EncodeToString(b)
}

// validCommandID keeps command ids from naming other paths.
func validCommandID(id string) error {
	rest, ok := strings.CutPrefix(id, "cmd_")
	if _, err := hex.DecodeString(rest); !ok || err != nil || len(rest) != 16 {
		return fmt.Errorf("command_id %q is not one command_start returned", id)
	}
	return nil
}

func (s *Server) output(ctx context.Context, req *mcp.CallToolRequest, in OutputInput) (*mcp.CallToolResult, OutputOutput, error) {
	if err := validCommandID(in.CommandID); err != nil {
		return nil, OutputOutput{}, err
	}
	limit, err := outputLimit(in.MaxOutputBytes)
	if err != nil {
		return nil, OutputOutput{}, err
	}
	sbx, err := s.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return nil, OutputOutput{}, err
	}
	dir := jobDir(in.CommandID)
	pidText, pidErr := sbx.Files.Read(ctx, path.Join(dir, "pid"), &sdk.FileOptions{User: "root"})
	if errors.Is(pidErr, sdk.ErrNotFound) {
		// Just started, before its script wrote the pid: it runs.
		if s.tagRunning(ctx, sbx, in.CommandID) {
			return nil, OutputOutput{Running: true}, nil
		}
		return nil, OutputOutput{}, fmt.Errorf("no command %s in sandbox %s (command_start returns the ids)", in.CommandID, in.SandboxID)
	}
	if pidErr != nil {
		return nil, OutputOutput{}, opFailed(pidErr, in.SandboxID)
	}
	// In this order: whether the script runs, then its exit file, then
	// its output. The script writes the exit file before it exits, so a
	// script found gone has written it — or was killed and never will —
	// and output read after the exit file is complete.
	pid, _ := strconv.Atoi(strings.TrimSpace(string(pidText)))
	running, err := s.pidRunning(ctx, sbx, uint32(pid))
	if err != nil {
		return nil, OutputOutput{}, opFailed(err, in.SandboxID)
	}
	var out OutputOutput
	exitText, exitErr := sbx.Files.Read(ctx, path.Join(dir, "exit"), &sdk.FileOptions{User: "root"})
	switch {
	case exitErr == nil:
		code, err := strconv.Atoi(strings.TrimSpace(string(exitText)))
		if err != nil {
			code = -1
		}
		out.ExitCode = &code
	case errors.Is(exitErr, sdk.ErrNotFound) && running:
		out.Running = true
	case errors.Is(exitErr, sdk.ErrNotFound):
		out.ExitCode = ptr(-1) // killed before it could write its status
	default:
		return nil, OutputOutput{}, opFailed(exitErr, in.SandboxID)
	}
	for _, f := range []struct {
		name string
		to   *string
	}{{"stdout", &out.Stdout}, {"stderr", &out.Stderr}} {
		b, err := sbx.Files.Read(ctx, path.Join(dir, f.name), &sdk.FileOptions{User: "root"})
		if err != nil && !errors.Is(err, sdk.ErrNotFound) {
			return nil, OutputOutput{}, opFailed(err, in.SandboxID)
		}
		if len(b) > limit {
			b, out.Truncated = b[len(b)-limit:], true
		}
		*f.to = string(b)
	}
	return nil, out, nil
}

// tagRunning reports whether the command command_start tagged with id
// runs.
func (s *Server) tagRunning(ctx context.Context, sbx *sdk.Sandbox, id string) bool {
	procs, err := sbx.Commands.List(ctx)
	if err != nil {
		return false
	}
	for _, p := range procs {
		if p.Tag == tagOf(id) {
			return true
		}
	}
	return false
}

func tagOf(id string) string { return "hutch-mcp-" + id }

func (s *Server) pidRunning(ctx context.Context, sbx *sdk.Sandbox, pid uint32) (bool, error) {
	procs, err := sbx.Commands.List(ctx)
	if err != nil {
		return false, err
	}
	for _, p := range procs {
		if p.PID == pid {
			return true, nil
		}
	}
	return false, nil
}

func (s *Server) interrupt(ctx context.Context, req *mcp.CallToolRequest, in InterruptInput) (*mcp.CallToolResult, InterruptOutput, error) {
	if err := validCommandID(in.CommandID); err != nil {
		return nil, InterruptOutput{}, err
	}
	sbx, err := s.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return nil, InterruptOutput{}, err
	}
	pidText, err := sbx.Files.Read(ctx, path.Join(jobDir(in.CommandID), "pid"), &sdk.FileOptions{User: "root"})
	if errors.Is(err, sdk.ErrNotFound) {
		return nil, InterruptOutput{}, fmt.Errorf("no command %s in sandbox %s", in.CommandID, in.SandboxID)
	}
	if err != nil {
		return nil, InterruptOutput{}, opFailed(err, in.SandboxID)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(pidText)))
	sig, send := "SIGTERM", sbx.Commands.Terminate
	if in.Force {
		sig, send = "SIGKILL", sbx.Commands.Kill
	}
	if err := send(ctx, uint32(pid)); err != nil {
		if errors.Is(err, sdk.ErrNotFound) {
			return nil, InterruptOutput{}, fmt.Errorf("command %s has already ended (command_output has its exit code)", in.CommandID)
		}
		return nil, InterruptOutput{}, opFailed(err, in.SandboxID)
	}
	return nil, InterruptOutput{Signal: sig}, nil
}

// bounded is a writer that keeps the first and last limit/2 bytes of what
// it is given and counts what it leaves out.
type bounded struct {
	limit int
	head  []byte
	tail  []byte // a window of the last limit-len(head) bytes
	cut   int
}

func newBounded(limit int) *bounded { return &bounded{limit: limit} }

func (b *bounded) Write(p []byte) (int, error) {
	n := len(p)
	if room := b.limit/2 - len(b.head); room > 0 {
		k := min(room, len(p))
		b.head = append(b.head, p[:k]...)
		p = p[k:]
	}
	keep := b.limit - b.limit/2
	b.tail = append(b.tail, p...)
	if over := len(b.tail) - keep; over > 0 {
		b.cut += over
		b.tail = append(b.tail[:0], b.tail[over:]...)
	}
	return n, nil
}

// String is the kept output, with a note where bytes were left out.
func (b *bounded) String() string {
	if b.cut == 0 {
		return string(b.head) + string(b.tail)
	}
	return fmt.Sprintf("%s\n[… %d bytes left out …]\n%s", b.head, b.cut, b.tail)
}
