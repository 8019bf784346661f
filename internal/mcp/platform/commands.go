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
	// OpenSandbox's.
	Background       *bool  `json:"background,omitempty" jsonschema:"OpenSandbox's: true starts the command in the background and returns its id at once (as command_start does)"`
	WorkingDirectory string `json:"working_directory,omitempty" jsonschema:"OpenSandbox's name of cwd"`
	ConnectIfMissing *bool  `json:"connect_if_missing,omitempty" jsonschema:"OpenSandbox's; ignored: every sandbox of the key is reachable"`
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
	SandboxID        string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	CommandID        string `json:"command_id,omitempty" jsonschema:"from command_start (or command_run with background). OpenSandbox's name: execution_id"`
	ExecutionID      string `json:"execution_id,omitempty" jsonschema:"OpenSandbox's name of command_id"`
	Force            bool   `json:"force,omitempty" jsonschema:"send SIGKILL instead of SIGTERM"`
	ConnectIfMissing *bool  `json:"connect_if_missing,omitempty" jsonschema:"OpenSandbox's; ignored"`
}

// InterruptOutput says what was done.
type InterruptOutput struct {
	Signal string `json:"signal"`
	Status string `json:"status" jsonschema:"interrupted (OpenSandbox's result)"`
}

// Execution is command_run's result in OpenSandbox's shape.
type Execution struct {
	ID       string             `json:"id" jsonschema:"the command's id; a background command's goes to command_output (as command_id) and to command_interrupt"`
	Result   []ExecutionResult  `json:"result" jsonschema:"always empty for commands"`
	Error    *ExecutionError    `json:"error,omitempty" jsonschema:"set when the command failed: value is its exit status"`
	Complete *ExecutionComplete `json:"complete,omitempty" jsonschema:"set when the command succeeded, or a background one started"`
	ExitCode *int               `json:"exit_code,omitempty" jsonschema:"the command's exit status; -1 when it was killed"`
	Logs     ExecutionLogs      `json:"logs"`
}

// ExecutionResult is a rich result of code; commands have none.
type ExecutionResult struct {
	Text      string `json:"text,omitempty"`
	Timestamp int64  `json:"timestamp"`
}

// ExecutionError says how a command failed.
type ExecutionError struct {
	Name      string   `json:"name" jsonschema:"CommandExecError"`
	Value     string   `json:"value" jsonschema:"the exit status"`
	Timestamp int64    `json:"timestamp" jsonschema:"Unix milliseconds"`
	Traceback []string `json:"traceback"`
}

// ExecutionComplete says when a command ended and how long it took.
type ExecutionComplete struct {
	Timestamp             int64 `json:"timestamp" jsonschema:"Unix milliseconds"`
	ExecutionTimeInMillis int64 `json:"execution_time_in_millis"`
}

// ExecutionLogs are a command's output.
type ExecutionLogs struct {
	Stdout []OutputMessage `json:"stdout" jsonschema:"the (bounded) standard output, in one message"`
	Stderr []OutputMessage `json:"stderr"`
}

// OutputMessage is output of one stream.
type OutputMessage struct {
	Text      string `json:"text"`
	Timestamp int64  `json:"timestamp" jsonschema:"Unix milliseconds"`
	IsError   bool   `json:"is_error,omitempty" jsonschema:"true for standard error"`
}

func (s *Server) addCommandTools(srv *mcp.Server) {
	addShapedTool[RunInput, RunOutput, Execution](srv, &mcp.Tool{
		Name: "command_run",
		Description: "Run a shell command in a sandbox and wait for it (up to timeout_seconds, default 60). Returns exit_code, stdout and stderr; long output keeps its start and end. A non-zero exit code is a normal result, not an error. " +
			"OpenSandbox's shape (background, working_directory or connect_if_missing given) returns OpenSandbox's Execution instead (id, exit_code, logs.stdout and logs.stderr, error with the exit status when it failed, complete when it succeeded); background: true starts the command as command_start does and returns its id at once. " +
			"A call with only sandbox_id and command gets both.",
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
		Description: "Stop a command started with command_start (or command_run with background): SIGTERM to it and its children, or SIGKILL with force. Takes command_id, or OpenSandbox's execution_id; returns the signal and status: interrupted.",
		Annotations: hint("Interrupt command", false, true, true),
	}, s.interrupt)
}

func (s *Server) run(ctx context.Context, req *mcp.CallToolRequest, in RunInput) (*mcp.CallToolResult, any, error) {
	if err := conflict("cwd", in.Cwd != "", "working_directory", in.WorkingDirectory != ""); err != nil {
		return nil, nil, err
	}
	hutch := in.Cwd != "" || in.Envs != nil || in.User != "" || in.TimeoutSeconds != 0 || in.MaxOutputBytes != 0
	osb := in.Background != nil || in.WorkingDirectory != "" || in.ConnectIfMissing != nil
	if in.WorkingDirectory != "" {
		in.Cwd = in.WorkingDirectory
	}
	if in.Background != nil && *in.Background {
		if in.TimeoutSeconds != 0 || in.MaxOutputBytes != 0 {
			return nil, nil, errors.New("timeout_seconds and max_output_bytes do not apply to a background command: stop it with command_interrupt, bound what command_output returns with its max_output_bytes")
		}
		began := time.Now()
		_, st, err := s.start(ctx, req, StartInput{SandboxID: in.SandboxID, Command: in.Command, Cwd: in.Cwd, Envs: in.Envs, User: in.User})
		if err != nil {
			return nil, nil, err
		}
		now := time.Now()
		return nil, Execution{ID: st.CommandID, Result: []ExecutionResult{}, Logs: ExecutionLogs{Stdout: []OutputMessage{}, Stderr: []OutputMessage{}},
			Complete: &ExecutionComplete{Timestamp: now.UnixMilli(), ExecutionTimeInMillis: now.Sub(began).Milliseconds()}}, nil
	}
	id := newCommandID()
	began := time.Now()
	out, err := s.runCommand(ctx, req, in, id)
	if err != nil {
		return nil, nil, err
	}
	exec := executionOf(id, out, began, time.Now())
	switch {
	case osb:
		return nil, exec, nil
	case hutch:
		return nil, out, nil
	}
	merged, err := both(out, exec)
	if err != nil {
		return nil, nil, err
	}
	return nil, merged, nil
}

// executionOf is how a command ran, as OpenSandbox's Execution says it.
func executionOf(id string, out RunOutput, began, ended time.Time) Execution {
	end := ended.UnixMilli()
	exec := Execution{ID: id, Result: []ExecutionResult{}, ExitCode: &out.ExitCode, Logs: ExecutionLogs{Stdout: []OutputMessage{}, Stderr: []OutputMessage{}}}
	if out.Stdout != "" {
		exec.Logs.Stdout = append(exec.Logs.Stdout, OutputMessage{Text: out.Stdout, Timestamp: end})
	}
	if out.Stderr != "" {
		exec.Logs.Stderr = append(exec.Logs.Stderr, OutputMessage{Text: out.Stderr, Timestamp: end, IsError: true})
	}
	switch {
	case out.ExitCode == 0:
		exec.Complete = &ExecutionComplete{Timestamp: end, ExecutionTimeInMillis: ended.Sub(began).Milliseconds()}
	case out.TimedOut:
		exec.Error = &ExecutionError{Name: "CommandExecError", Value: "-1", Timestamp: end, Traceback: []string{"timed out and killed (timeout_seconds)"}}
	default:
		exec.Error = &ExecutionError{Name: "CommandExecError", Value: strconv.Itoa(out.ExitCode), Timestamp: end, Traceback: []string{fmt.Sprintf("exit status %d", out.ExitCode)}}
	}
	return exec
}

// runCommand runs a command and waits for it, its process tagged with
// id (command_start's tags) while it runs.
func (s *Server) runCommand(ctx context.Context, req *mcp.CallToolRequest, in RunInput, id string) (RunOutput, error) {
	if strings.TrimSpace(in.Command) == "" {
		return RunOutput{}, errors.New("command is empty")
	}
	timeout := DefaultCommandTimeout
	if in.TimeoutSeconds != 0 {
		timeout = time.Duration(in.TimeoutSeconds) * time.Second
		if in.TimeoutSeconds < 0 || timeout > MaxCommandTimeout {
			return RunOutput{}, fmt.Errorf("timeout_seconds must be between 1 and %d; use command_start for longer work", int(MaxCommandTimeout/time.Second))
		}
	}
	limit, err := outputLimit(in.MaxOutputBytes)
	if err != nil {
		return RunOutput{}, err
	}
	sbx, err := s.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return RunOutput{}, err
	}
	stdout, stderr := newBounded(limit), newBounded(limit)
	res, err := sbx.Commands.Run(ctx, in.Command, &sdk.RunOptions{
		Cwd: in.Cwd, Envs: in.Envs, User: in.User, Timeout: timeout, Stdout: stdout, Stderr: stderr, Tag: tagOf(id),
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
		return RunOutput{}, opFailed(err, in.SandboxID)
	}
	return out, nil
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
	if err := conflict("command_id", in.CommandID != "", "execution_id", in.ExecutionID != ""); err != nil {
		return nil, InterruptOutput{}, err
	}
	if in.ExecutionID != "" {
		in.CommandID = in.ExecutionID
	}
	if err := validCommandID(in.CommandID); err != nil {
		return nil, InterruptOutput{}, err
	}
	sbx, err := s.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return nil, InterruptOutput{}, err
	}
	pidFile := path.Join(jobDir(in.CommandID), "pid")
	pidText, err := sbx.Files.Read(ctx, pidFile, &sdk.FileOptions{User: "root"})
	// Just started, before its script wrote the pid: wait for it.
	for deadline := time.Now().Add(5 * time.Second); errors.Is(err, sdk.ErrNotFound) && time.Now().Before(deadline) && s.tagRunning(ctx, sbx, in.CommandID); {
		time.Sleep(50 * time.Millisecond)
		pidText, err = sbx.Files.Read(ctx, pidFile, &sdk.FileOptions{User: "root"})
	}
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
	return nil, InterruptOutput{Signal: sig, Status: "interrupted"}, nil
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
