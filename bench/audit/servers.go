package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
)

// server is a `hutch serve` this harness started.
type server struct {
	*harness.Process
	name string // "audit on", "audit off", "events"
	args []string
	data string // its data directory
	url  string // http://127.0.0.1:port
}

// startServe starts `hutch serve --listen 127.0.0.1:0 args...` on data
// (which must exist) with the run's key, its output in data + ".log", and
// waits until it answers GET /health.
func (b *bench) startServe(ctx context.Context, name, data string, args ...string) (*server, error) {
	s := &server{name: name, data: data}
	s.args = append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)
	fmt.Printf("==> hutch %s (data %s)\n", strings.Join(s.args, " "), data)
	p, err := harness.Launch("hutch serve ("+name+")", data+".log",
		[]string{"HUTCH_DATA_DIR=" + data, "HUTCH_API_KEY=" + b.key, "HUTCH_TEMPLATES=" + b.cfg.templates}, append([]string{b.cfg.hutch}, s.args...)...)
	if err != nil {
		return nil, err
	}
	s.Process = p
	if err := s.waitHealthy(ctx); err != nil {
		s.stop()
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

// stop ends the server (SIGTERM, SIGKILL after 30 s) and waits for it. On
// SIGTERM serve removes its warm pool; the sandboxes it handed out outlive
// it by design, so kill those through the API first.
func (s *server) stop() {
	if s != nil && s.Process != nil {
		s.Stop(30 * time.Second)
	}
}

// sandboxesIn counts the sandboxes of a data directory (`hutch ps -q`): the
// warm pool's from their start, and the ones handed out.
func (b *bench) sandboxesIn(data string) (int, error) {
	cmd := exec.Command(b.cfg.hutch, "ps", "-q")
	cmd.Env = append(os.Environ(), "HUTCH_DATA_DIR="+data, "HUTCH_TEMPLATES="+b.cfg.templates)
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("hutch ps -q (%s): %w", filepath.Base(data), err)
	}
	return len(strings.Fields(string(out))), nil
}
