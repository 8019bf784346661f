package sdk

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

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
	mux := http.NewServeMux()
	mux.Handle(processconnect.NewProcessHandler(fake))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c, err := NewClient(Config{APIKey: "k", APIURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	sbx := c.newSandbox(e2bapiSandbox("ia", ""))
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
