package sdk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"

	"github.com/hutch-sandbox/hutch/api/gen/process"
	"github.com/hutch-sandbox/hutch/api/gen/process/processconnect"
)

// fakeProcess is an envd process service that records what it is asked
// to start and answers with a process that prints "out" and exits 0.
type fakeProcess struct {
	processconnect.UnimplementedProcessHandler
	mu      sync.Mutex
	started []*process.ProcessConfig
}

func (f *fakeProcess) Start(ctx context.Context, req *connect.Request[process.StartRequest], stream *connect.ServerStream[process.StartResponse]) error {
	f.mu.Lock()
	f.started = append(f.started, req.Msg.GetProcess())
	f.mu.Unlock()
	for _, ev := range []*process.ProcessEvent{
		{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: 7}}},
		{Event: &process.ProcessEvent_Data{Data: &process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Stdout{Stdout: []byte("out")}}}},
		{Event: &process.ProcessEvent_End{End: &process.ProcessEvent_EndEvent{Exited: true, Status: "exit status 0"}}},
	} {
		if err := stream.Send(&process.StartResponse{Event: ev}); err != nil {
			return err
		}
	}
	return nil
}

// TestExecRunsArgvWithoutAShell checks the Process/Start requests of Run
// and Exec: Run wraps its command line in a login shell, as E2B's SDKs
// do; Exec sends the program and its arguments as they are.
func TestExecRunsArgvWithoutAShell(t *testing.T) {
	fake := &fakeProcess{}
	sbx := processSandbox(t, fake)
	ctx := t.Context()

	res, err := sbx.Commands.Exec(ctx, []string{"/usr/bin/tar", "-c", "-f", "/tmp/a b.tar", "-C", "$HOME; rm -rf /", "./x"}, &RunOptions{Envs: map[string]string{"A": "1"}})
	if err != nil || res.Stdout != "out" || res.ExitCode != 0 {
		t.Fatalf("Exec = %+v, %v", res, err)
	}
	if _, err := sbx.Commands.Run(ctx, "echo hi", nil); err != nil {
		t.Fatal(err)
	}
	type cfg struct {
		Cmd  string
		Args []string
		Envs map[string]string
	}
	var got []cfg
	for _, p := range fake.started {
		got = append(got, cfg{p.GetCmd(), p.GetArgs(), p.GetEnvs()})
	}
	want := []cfg{
		{"/usr/bin/tar", []string{"-c", "-f", "/tmp/a b.tar", "-C", "$HOME; rm -rf /", "./x"}, map[string]string{"A": "1"}},
		{"/bin/bash", []string{"-l", "-c", "echo hi"}, nil},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("started (-want +got):\n%s", diff)
	}

	for _, argv := range [][]string{nil, {""}} {
		if _, err := sbx.Commands.Exec(ctx, argv, nil); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Exec(%q): %v, want ErrInvalidArgument", argv, err)
		}
	}
}

// floodProcess is an envd process service whose process writes 64 KiB
// chunks to stdout and stderr without end, as `yes` does, until it is
// killed; unless deaf, a SIGKILL ends it with the end event.
type floodProcess struct {
	processconnect.UnimplementedProcessHandler
	deaf   bool
	killed chan uint32 // the pid of each SendSignal SIGKILL
}

func (f *floodProcess) Start(ctx context.Context, req *connect.Request[process.StartRequest], stream *connect.ServerStream[process.StartResponse]) error {
	send := func(ev *process.ProcessEvent) error { return stream.Send(&process.StartResponse{Event: ev}) }
	if err := send(&process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: 9}}}); err != nil {
		return err
	}
	chunk := bytes.Repeat([]byte("AAAA\n"), 64<<10/5)
	for i := 0; ; i++ {
		select {
		case <-f.killed:
			if !f.deaf {
				return send(&process.ProcessEvent{Event: &process.ProcessEvent_End{End: &process.ProcessEvent_EndEvent{ExitCode: -1, Status: "signal: killed"}}})
			}
		default:
		}
		data := &process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Stdout{Stdout: chunk}}
		if i%2 == 1 {
			data = &process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Stderr{Stderr: chunk}}
		}
		if err := send(&process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: data}}); err != nil {
			return err
		}
	}
}

func (f *floodProcess) SendSignal(ctx context.Context, req *connect.Request[process.SendSignalRequest]) (*connect.Response[process.SendSignalResponse], error) {
	if req.Msg.GetSignal() == process.Signal_SIGNAL_SIGKILL {
		// A closed channel: every later receive sees the kill.
		select {
		case <-f.killed:
		default:
			close(f.killed)
		}
	}
	return connect.NewResponse(&process.SendSignalResponse{}), nil
}

// TestMaxOutput: a command whose output passes RunOptions.MaxOutput is
// killed, and Run and Exec return ErrOutputLimit with the output kept up
// to the cap, also when the sandbox goes on sending after the kill
// (review finding C2: `hutch cp` kept a replaced du's endless output,
// 6.2 GB after 24 s).
func TestMaxOutput(t *testing.T) {
	const max = 100 << 10
	runs := map[string]func(*Sandbox) (*CommandResult, error){
		"Run": func(sbx *Sandbox) (*CommandResult, error) {
			return sbx.Commands.Run(t.Context(), "du", &RunOptions{MaxOutput: max, Timeout: NoTimeout})
		},
		"Exec": func(sbx *Sandbox) (*CommandResult, error) {
			return sbx.Commands.Exec(t.Context(), []string{"/usr/bin/du"}, &RunOptions{MaxOutput: max, Timeout: NoTimeout})
		},
	}
	for _, deaf := range []bool{false, true} {
		for name, run := range runs {
			t.Run(fmt.Sprintf("%s deaf=%v", name, deaf), func(t *testing.T) {
				t.Parallel()
				fake := &floodProcess{deaf: deaf, killed: make(chan uint32)}
				sbx := processSandbox(t, fake)
				start := time.Now()
				res, err := run(sbx)
				took := time.Since(start)
				if !errors.Is(err, ErrOutputLimit) || !strings.Contains(err.Error(), "MaxOutput (102400 bytes)") {
					t.Fatalf("err = %v, want ErrOutputLimit naming the cap", err)
				}
				if res == nil || len(res.Stdout)+len(res.Stderr) != max || !strings.HasPrefix(res.Stdout, "AAAA\n") || res.ExitCode != -1 {
					t.Fatalf("result: %d bytes kept, exit %d; want the first %d", len(res.Stdout)+len(res.Stderr), res.ExitCode, max)
				}
				select {
				case <-fake.killed:
				default:
					t.Error("the command was not killed")
				}
				// Killed, it ends at once; a sandbox that goes on is left
				// after outputLimitGrace.
				if !deaf && took > outputLimitGrace || took > outputLimitGrace+5*time.Second {
					t.Errorf("took %v", took)
				}
			})
		}
	}

	t.Run("negative", func(t *testing.T) {
		c, _ := NewClient(Config{APIKey: "k", APIURL: "http://127.0.0.1:1"})
		sbx := c.newSandbox(e2bapiSandbox("ia", ""))
		if _, err := sbx.Commands.Run(t.Context(), "true", &RunOptions{MaxOutput: -1}); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("MaxOutput -1: %v, want ErrInvalidArgument", err)
		}
	})
}

// processSandbox is a sandbox whose envd is h, served for the test.
func processSandbox(t *testing.T, h processconnect.ProcessHandler) *Sandbox {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(processconnect.NewProcessHandler(h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c, err := NewClient(Config{APIKey: "k", APIURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return c.newSandbox(e2bapiSandbox("ia", ""))
}
