package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"
)

// worker is one SDK's Python process (worker.py), driven one operation
// at a time.
type worker struct {
	name   string // "osb", "e2b"
	sdk    string // what hello answered: "opensandbox 1.1.1"
	py     string // its Python version
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *os.File
}

// workerTimeout bounds one operation of a worker: a create that hangs
// fails the iteration instead of the run.
const workerTimeout = 2 * time.Minute

// startWorker starts worker.py for sdk ("osb" or "e2b") with python,
// env added to the harness's environment, and asks who it is. Its stderr
// (an SDK's warnings) goes to logPath.
func (b *bench) startWorker(sdk, python, logPath string, env []string) (*worker, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(python, b.cfg.worker, sdk)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = f
	in, err := cmd.StdinPipe()
	if err != nil {
		f.Close()
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		f.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s %s: %w", python, b.cfg.worker, err)
	}
	w := &worker{name: sdk, cmd: cmd, in: in, out: bufio.NewReaderSize(out, 64<<10), stderr: f}
	var hello struct {
		SDK    string `json:"sdk"`
		Python string `json:"python"`
	}
	if err := w.call(context.Background(), map[string]any{"op": "hello"}, &hello); err != nil {
		w.stop()
		return nil, fmt.Errorf("%s worker: %w (its stderr: %s)", sdk, err, logPath)
	}
	w.sdk, w.py = hello.SDK, hello.Python
	return w, nil
}

// call sends req and decodes the answer into out; an answer with an
// error is an error. A worker that does not answer within workerTimeout
// is killed (its later answers would be out of step).
func (w *worker) call(ctx context.Context, req map[string]any, out any) error {
	line, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if _, err := w.in.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("%s worker: %w", w.name, err)
	}
	type answer struct {
		line []byte
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		l, err := w.out.ReadBytes('\n')
		got <- answer{l, err}
	}()
	var a answer
	select {
	case a = <-got:
	case <-ctx.Done():
		w.cmd.Process.Kill()
		return ctx.Err()
	case <-time.After(workerTimeout):
		w.cmd.Process.Kill()
		return fmt.Errorf("%s worker: no answer to %s within %v", w.name, req["op"], workerTimeout)
	}
	if a.err != nil {
		return fmt.Errorf("%s worker: %w", w.name, a.err)
	}
	var e struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(a.line, &e); err != nil {
		return fmt.Errorf("%s worker: %q: %w", w.name, a.line, err)
	}
	if e.Error != "" {
		return errors.New(e.Error)
	}
	if out != nil {
		return json.Unmarshal(a.line, out)
	}
	return nil
}

// stop ends the worker: stdin closed, which ends its loop; killed after
// 10 s.
func (w *worker) stop() {
	if w == nil {
		return
	}
	w.in.Close()
	done := make(chan struct{})
	go func() { w.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		w.cmd.Process.Kill()
		<-done
	}
	w.stderr.Close()
}

// timing is a worker's answer to a timed operation, in ms: total (or
// write, read), create's parts, and the client's CPU (Python's
// process_time over the timed calls).
type timing struct {
	Total  float64 `json:"total"`
	Create float64 `json:"create"`
	Run    float64 `json:"run"`
	CPU    float64 `json:"cpu"`
}

func msDur(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
