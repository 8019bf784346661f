package sdk_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/sdk"
)

// TestDoneContext: a context that has ended makes every call fail at
// once with an error matching the context's, and does nothing.
func TestDoneContext(t *testing.T) {
	e := startServer(t)
	sbx := e.sandbox(t, sdk.CreateOptions{})
	ctx := t.Context()
	tag := unique("nocreate")
	marker := unique("norun")
	path := home + "/" + unique("nowrite")

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	expired, cancel2 := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel2()

	calls := map[string]func(context.Context) error{
		"Create": func(c context.Context) error {
			_, err := sdk.Create(c, sdk.CreateOptions{Config: e.cfg, Metadata: map[string]string{"tag": tag}})
			return err
		},
		"Connect":   func(c context.Context) error { _, err := e.client.Connect(c, sbx.ID, sdk.ConnectOptions{}); return err },
		"GetInfo":   func(c context.Context) error { _, err := sbx.GetInfo(c); return err },
		"Kill":      func(c context.Context) error { return sbx.Kill(c) },
		"NextItems": func(c context.Context) error { _, err := e.client.List(sdk.ListOptions{}).NextItems(c); return err },
		"Run":       func(c context.Context) error { _, err := sbx.Commands.Run(c, "echo; : "+marker, nil); return err },
		"Start": func(c context.Context) error {
			_, err := sbx.Commands.Start(c, "sleep 100; : "+marker, nil)
			return err
		},
		"Commands.List": func(c context.Context) error {
			_, err := sbx.Commands.List(c)
			return err
		},
		"Pty.Create": func(c context.Context) error { _, err := sbx.Pty.Create(c, sdk.PtyOptions{}); return err },
		"Read":       func(c context.Context) error { _, err := sbx.Files.Read(c, "/etc/hostname", nil); return err },
		"Write":      func(c context.Context) error { _, err := sbx.Files.Write(c, path, []byte("x"), nil); return err },
		"WatchDir":   func(c context.Context) error { _, err := sbx.Files.WatchDir(c, home, nil, nil); return err },
		"IsRunning":  func(c context.Context) error { _, err := sbx.IsRunning(c); return err },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			is(t, call(cancelled), context.Canceled, name+" with a cancelled context")
			err := call(expired)
			is(t, err, context.DeadlineExceeded, name+" with an expired context")
			is(t, err, sdk.ErrTimeout, name+" with an expired context")
		})
	}

	// Background starts with a done context, many times: none may leave
	// a process behind (the stream's own cancellation comes from another
	// goroutine, and a request that went out would start the process).
	before, err := sbx.Commands.List(ctx)
	must(t, err, "Commands.List")
	for range 30 {
		for _, c := range []context.Context{cancelled, expired} {
			if _, err := sbx.Commands.Start(c, "sleep 100; : "+marker, &sdk.RunOptions{Timeout: sdk.NoTimeout}); err == nil {
				t.Fatal("Start with a done context succeeded")
			}
			if _, err := sbx.Pty.Create(c, sdk.PtyOptions{Timeout: sdk.NoTimeout}); err == nil {
				t.Fatal("Pty.Create with a done context succeeded")
			}
		}
	}
	after, err := sbx.Commands.List(ctx)
	must(t, err, "Commands.List")
	if len(after) != len(before) {
		t.Errorf("starts with a done context left %d processes running", len(after)-len(before))
	}

	// None of it happened.
	p := e.client.List(sdk.ListOptions{Metadata: map[string]string{"tag": tag}})
	items, err := p.NextItems(ctx)
	must(t, err, "List")
	if len(items) != 0 {
		t.Errorf("Create with a done context made %d sandboxes", len(items))
	}
	if ok, err := sbx.IsRunning(ctx); err != nil || !ok {
		t.Errorf("Kill with a done context: IsRunning = %v, %v", ok, err)
	}
	if processRunning(t, sbx, marker) {
		t.Error("Run or Start with a done context left a process running")
	}
	if ok, err := sbx.Files.Exists(ctx, path, nil); err != nil || ok {
		t.Errorf("Write with a done context: Exists = %v, %v", ok, err)
	}
}

// TestCancelWhileStarting: a context cancelled while Run, Start or
// Pty.Create is still waiting for the process to start returns at once
// and leaves no process behind, whenever in the start the cancel lands.
func TestCancelWhileStarting(t *testing.T) {
	e := startServer(t, "--warm", "0")
	sbx := e.sandbox(t, sdk.CreateOptions{})
	ctx := context.Background()
	marker := unique("starting")
	for i := range 40 {
		c, cancel := context.WithCancel(ctx)
		// 0–39 ms: before the request, in flight, or after the start.
		time.AfterFunc(time.Duration(i)*time.Millisecond, cancel)
		var err error
		switch i % 3 {
		case 0:
			_, err = sbx.Commands.Run(c, "sleep 100; : "+marker, &sdk.RunOptions{Timeout: sdk.NoTimeout})
		case 1:
			var h *sdk.CommandHandle
			if h, err = sbx.Commands.Start(c, "sleep 100; : "+marker, &sdk.RunOptions{Timeout: sdk.NoTimeout}); err == nil {
				must(t, h.Kill(ctx), "Kill of a started command")
			}
		case 2:
			var h *sdk.CommandHandle
			if h, err = sbx.Pty.Create(c, sdk.PtyOptions{Timeout: sdk.NoTimeout, Envs: map[string]string{"MARK": marker}}); err == nil {
				must(t, h.Kill(ctx), "Kill of a started terminal")
			}
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("iteration %d: %v, want context.Canceled or success", i, err)
		}
		cancel()
	}
	// Processes that started after the cancel are killed by the SDK in the
	// background: wait for that, then nothing of ours may be left.
	waitFor(t, 20*time.Second, func() string { return "processes still running" }, func() bool {
		procs, err := sbx.Commands.List(ctx)
		must(t, err, "Commands.List")
		for _, p := range procs {
			if strings.Contains(strings.Join(p.Args, " "), marker) || p.Envs["MARK"] == marker {
				return false
			}
		}
		return true
	})
}
