package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/sdk"
)

// These examples compile as part of the tests; they have no Output
// comments because they need a running `hutch serve` (E2B_API_KEY and
// E2B_API_URL, or HUTCH_API_KEY and HUTCH_API_URL, in the environment).
// test/sdk runs the same calls against a real server.

func Example() {
	ctx := context.Background()
	sbx, err := sdk.Create(ctx, sdk.CreateOptions{Template: "base", Timeout: 10 * time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer sbx.Kill(context.Background())

	res, err := sbx.Commands.Run(ctx, "python3 -c 'print(6*7)'", nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Stdout) // 42
}

func ExampleNewClient() {
	c, err := sdk.NewClient(sdk.Config{
		APIURL: "http://127.0.0.1:3000",
		APIKey: os.Getenv("HUTCH_API_KEY"),
	})
	if err != nil {
		log.Fatal(err)
	}
	sbx, err := c.Create(context.Background(), sdk.CreateOptions{Metadata: map[string]string{"job": "build-42"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(sbx.ID)
}

func ExampleConnect() {
	ctx := context.Background()
	sbx, err := sdk.Connect(ctx, "i0123456789abcdefghij", sdk.ConnectOptions{Timeout: 5 * time.Minute})
	if errors.Is(err, sdk.ErrNotFound) {
		log.Fatal("the sandbox is gone")
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(sbx.ID)
}

func ExamplePaginator_All() {
	ctx := context.Background()
	p, err := sdk.List(sdk.ListOptions{Metadata: map[string]string{"job": "build-42"}, States: []string{sdk.StateRunning}})
	if err != nil {
		log.Fatal(err)
	}
	for info, err := range p.All(ctx) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(info.SandboxID, info.StartedAt, info.Metadata)
	}
}

func ExampleCommands_Run() {
	ctx := context.Background()
	sbx, err := sdk.Create(ctx, sdk.CreateOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sbx.Kill(context.Background())

	// Output streams as it arrives; the exit status is an error.
	_, err = sbx.Commands.Run(ctx, "for i in 1 2 3; do echo $i; sleep 1; done; exit 2", &sdk.RunOptions{
		Stdout:  os.Stdout,
		Stderr:  os.Stderr,
		Envs:    map[string]string{"LANG": "C.UTF-8"},
		Timeout: time.Minute,
	})
	var exit *sdk.CommandExitError
	if errors.As(err, &exit) {
		fmt.Println("exit status", exit.ExitCode) // exit status 2
	}
}

func ExampleCommands_Exec() {
	ctx := context.Background()
	sbx, err := sdk.Create(ctx, sdk.CreateOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sbx.Kill(context.Background())

	// No shell: the user's startup files are not read, and a path with
	// spaces or quotes is one argument.
	res, err := sbx.Commands.Exec(ctx, []string{"/usr/bin/stat", "-c", "%a %U", "/home/user/it's here"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Stdout)
}

func ExampleCommands_Start() {
	ctx := context.Background()
	sbx, err := sdk.Create(ctx, sdk.CreateOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sbx.Kill(context.Background())

	// A background process with its standard input open.
	h, err := sbx.Commands.Start(ctx, "tr a-z A-Z", &sdk.RunOptions{Stdin: true, Timeout: sdk.NoTimeout})
	if err != nil {
		log.Fatal(err)
	}
	h.SendStdin(ctx, []byte("hello\n"))
	h.CloseStdin(ctx)
	res, err := h.Wait(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Stdout) // HELLO
}

func ExamplePty_Create() {
	ctx := context.Background()
	sbx, err := sdk.Create(ctx, sdk.CreateOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sbx.Kill(context.Background())

	var screen strings.Builder
	term, err := sbx.Pty.Create(ctx, sdk.PtyOptions{Size: sdk.PtySize{Cols: 120, Rows: 40}, Output: &screen})
	if err != nil {
		log.Fatal(err)
	}
	sbx.Pty.SendInput(ctx, term.PID, []byte("stty size; exit\n"))
	if _, err := term.Wait(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println(strings.Contains(screen.String(), "40 120")) // true
}

func ExampleFiles() {
	ctx := context.Background()
	sbx, err := sdk.Create(ctx, sdk.CreateOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sbx.Kill(context.Background())

	if _, err := sbx.Files.Write(ctx, "project/main.py", []byte("print('hi')\n"), nil); err != nil {
		log.Fatal(err)
	}
	entries, err := sbx.Files.List(ctx, "project", nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range entries {
		fmt.Println(e.Name, e.Type, e.Size, e.Mode)
	}
	if _, err := sbx.Files.Read(ctx, "missing.txt", nil); errors.Is(err, sdk.ErrNotFound) {
		fmt.Println("no such file")
	}
}

func ExampleFiles_WatchDir() {
	ctx := context.Background()
	sbx, err := sdk.Create(ctx, sdk.CreateOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sbx.Kill(context.Background())

	w, err := sbx.Files.WatchDir(ctx, "/home/user", func(ev sdk.FilesystemEvent) {
		fmt.Println(ev.Type, ev.Name)
	}, &sdk.WatchOptions{Recursive: true, Timeout: sdk.NoTimeout})
	if err != nil {
		log.Fatal(err)
	}
	sbx.Files.Write(ctx, "/home/user/notes.txt", []byte("x"), nil) // create notes.txt, write notes.txt
	time.Sleep(time.Second)
	w.Stop()
}

func ExampleSandbox_DownloadURL() {
	ctx := context.Background()
	sbx, err := sdk.Create(ctx, sdk.CreateOptions{})
	if err != nil {
		log.Fatal(err)
	}
	// Anyone holding the URL can fetch the file for the next 10 minutes.
	u, err := sbx.DownloadURL("/home/user/report.pdf", &sdk.URLOptions{Expires: 10 * time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(u)
}

func ExampleSandbox_PortRequest() {
	ctx := context.Background()
	sbx, err := sdk.Create(ctx, sdk.CreateOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sbx.Kill(context.Background())

	if _, err := sbx.Commands.Start(ctx, "python3 -m http.server 8000", &sdk.RunOptions{Timeout: sdk.NoTimeout}); err != nil {
		log.Fatal(err)
	}
	req, err := sbx.PortRequest(ctx, "GET", 8000, "/", nil)
	if err != nil {
		log.Fatal(err)
	}
	resp, err := sbx.HTTPClient().Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	fmt.Println(resp.Status)
}

func ExampleSandbox_RunCode() {
	ctx := context.Background()
	sbx, err := sdk.Create(ctx, sdk.CreateOptions{Template: sdk.CodeInterpreterTemplate})
	if err != nil {
		log.Fatal(err)
	}
	defer sbx.Kill(context.Background())

	// State lasts between calls: the default Python context keeps x.
	if _, err := sbx.RunCode(ctx, "x = 41", nil); err != nil {
		log.Fatal(err)
	}
	exec, err := sbx.RunCode(ctx, "print('adding'); x + 1", &sdk.RunCodeOptions{
		OnStdout: func(m sdk.OutputMessage) { fmt.Print("live: ", m.Line) },
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(exec.Text()) // 42

	// An error the code raises is the execution's, not RunCode's.
	exec, err = sbx.RunCode(ctx, "1/0", nil)
	if err == nil && exec.Error != nil {
		fmt.Println(exec.Error.Name, exec.Error.Value) // ZeroDivisionError division by zero
	}

	// A context of its own: another kernel, another language.
	js, err := sbx.CreateCodeContext(ctx, "javascript", "/tmp")
	if err != nil {
		log.Fatal(err)
	}
	exec, err = sbx.RunCode(ctx, "[1, 2, 3].map(n => n * 2)", &sdk.RunCodeOptions{Context: js, Timeout: 10 * time.Second})
	if errors.Is(err, sdk.ErrTimeout) {
		log.Fatal("interrupted after 10 s")
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(exec.Text())
}
