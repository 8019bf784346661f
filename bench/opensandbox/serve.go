package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
	"github.com/hutch-sandbox/hutch/internal/e2bapi"
	"github.com/hutch-sandbox/hutch/internal/osbapi"
)

// server is a `hutch serve` this harness started.
type server struct {
	*harness.Process
	name string // "--warm 0", "warm pool of 4"
	args []string
	data string // its data directory
	url  string // http://127.0.0.1:port
	warm int    // its warm pool's size
}

// startServe starts `hutch serve --listen 127.0.0.1:0 args...` on a fresh
// data directory under -dir with the run's key, its output in the
// directory's name + ".log", and waits until it answers GET /health and
// its warm pool (warm sandboxes) has started.
func (b *bench) startServe(ctx context.Context, name, dirName string, warm int, args ...string) (*server, error) {
	data := filepath.Join(b.cfg.dir, dirName)
	if err := os.RemoveAll(data); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(data, 0o711); err != nil {
		return nil, err
	}
	s := &server{name: name, data: data, warm: warm}
	s.args = append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)
	fmt.Printf("==> hutch %s (data %s)\n", strings.Join(s.args, " "), data)
	p, err := harness.Launch("hutch serve ("+name+")", data+".log",
		[]string{"HUTCH_DATA_DIR=" + data, "HUTCH_API_KEY=" + b.key, "HUTCH_TEMPLATES=" + b.cfg.templates},
		append([]string{b.cfg.hutch}, s.args...)...)
	if err != nil {
		return nil, err
	}
	s.Process = p
	if err := s.waitHealthy(ctx); err != nil {
		s.Stop(30 * time.Second)
		return nil, err
	}
	if err := b.waitPool(ctx, s); err != nil {
		s.Stop(30 * time.Second)
		return nil, err
	}
	return s, nil
}

// waitHealthy waits for s to serve (harness.Process.WaitServing) and
// keeps its URL.
func (s *server) waitHealthy(ctx context.Context) error {
	url, err := s.WaitServing(ctx, s.name)
	s.url = url
	return err
}

// waitPool waits until s's warm pool is full (its sandboxes are in
// `hutch ps` from their start; none is handed out between the creates)
// and then -settle more, so that the last refill's envd is up and no
// refill runs during the next create. With --warm 0 only -settle.
func (b *bench) waitPool(ctx context.Context, s *server) error {
	if s.warm > 0 {
		deadline := time.Now().Add(30 * time.Second)
		for ctx.Err() == nil {
			cmd := exec.CommandContext(ctx, b.cfg.hutch, "ps", "-q")
			cmd.Env = append(os.Environ(), "HUTCH_DATA_DIR="+s.data, "HUTCH_TEMPLATES="+b.cfg.templates)
			out, err := cmd.Output()
			if err != nil {
				return fmt.Errorf("hutch ps -q (%s): %w", s.name, err)
			}
			n := len(strings.Fields(string(out)))
			if n >= s.warm {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the warm pool of %s did not refill within 30 s (%d sandboxes)", s.name, n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(b.cfg.settle):
		return nil
	}
}

// killAll kills every sandbox of the run's key on s through E2B's API (a
// run cut short leaves some; the warm pool's are not listed), then stops
// s, whose SIGTERM removes its pool.
func (b *bench) killAll(s *server) {
	if s == nil {
		return
	}
	// Not the harness's context: after Ctrl-C the sandboxes still go.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var list []e2bapi.ListedSandbox
	if err := b.api(ctx, s, http.MethodGet, "/sandboxes", nil, http.StatusOK, &list); err != nil {
		fmt.Fprintf(os.Stderr, "bench-opensandbox: list the sandboxes of %s: %v\n", s.name, err)
	}
	for _, sb := range list {
		if err := b.api(ctx, s, http.MethodDelete, "/sandboxes/"+sb.SandboxID, nil, http.StatusNoContent, nil); err != nil {
			fmt.Fprintf(os.Stderr, "bench-opensandbox: kill %s: %v\n", sb.SandboxID, err)
		}
	}
	s.Stop(30 * time.Second)
}

// api is one call of E2B's REST API (X-API-Key) or, for paths under
// /v1, OpenSandbox's lifecycle API (OPEN-SANDBOX-API-KEY), on b.api's
// client: body sent as JSON, the answer (which must be want) decoded into
// out when out is not nil.
func (b *bench) api(ctx context.Context, s *server, method, path string, body any, want int, out any) error {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.url+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if strings.HasPrefix(path, "/v1/") {
		req.Header.Set(osbapi.HeaderAPIKey, b.key)
	} else {
		req.Header.Set("X-API-Key", b.key)
	}
	resp, err := b.apiClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, harness.OneLine(string(data)))
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// cpuMeter measures a process's CPU over one operation: calling it
// reads the start, the function it returns the CPU used since.
type cpuMeter func() (since func() time.Duration)

// threadCPU is a cpuMeter of process pid precise to the nanosecond: each
// thread's time on a CPU (/proc/<pid>/task/<tid>/schedstat) at the start
// and the end, for the threads alive at the end (a thread new since
// counts whole). A thread that ends during the operation is not counted:
// for the running-sandbox rows, where serve's threads live on; the
// create rows use processCPU.
func threadCPU(pid int) cpuMeter {
	return func() func() time.Duration {
		before := threadTimes(pid)
		return func() time.Duration {
			var d time.Duration
			for tid, t := range threadTimes(pid) {
				d += t - before[tid]
			}
			return d
		}
	}
}

// threadTimes reads every thread's time on a CPU so far.
func threadTimes(pid int) map[string]time.Duration {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	times := make(map[string]time.Duration, len(ents))
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "schedstat"))
		if err != nil {
			continue // the thread is gone
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		if ns, err := strconv.ParseInt(f[0], 10, 64); err == nil {
			times[e.Name()] = time.Duration(ns)
		}
	}
	return times
}

// processCPU is a cpuMeter of process pid that counts the threads that
// end too (serve's sandbox starts end the threads they lock): its user
// and system time (/proc/<pid>/stat, not its reaped children's), which
// the kernel keeps to the nanosecond but shows in 10 ms ticks, so one
// operation's reading is off by up to a tick either way; over many
// operations the errors average out.
func processCPU(pid int) cpuMeter {
	read := func() time.Duration {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0
		}
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			return 0
		}
		// After the command: state(0) … utime(11) stime(12).
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 13 {
			return 0
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		return time.Duration(u+s) * time.Second / 100 // USER_HZ
	}
	return func() func() time.Duration {
		before := read()
		return func() time.Duration { return read() - before }
	}
}
