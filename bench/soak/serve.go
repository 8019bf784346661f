package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
)

// server is the hutch serve the harness started.
type server struct {
	hutch, dataDir string
	args           []string
	p              *harness.Process
}

var (
	servingRe = regexp.MustCompile(`msg=serving addr=([0-9.:]+)`)
	metricsRe = regexp.MustCompile(`msg="serving metrics" addr=([0-9.:]+)`)
)

// startServe starts `hutch serve` with a fresh data directory under
// cfg.root and fills in cfg's URL, data directory, pid, metrics and key.
func startServe(ctx context.Context, cfg *config) (*server, error) {
	self, _ := os.Readlink("/proc/self/ns/net")
	init, _ := os.Readlink("/proc/1/ns/net")
	if cfg.network && self == init {
		return nil, fmt.Errorf("a serve with networking must run in a network namespace of its own, not the host's: run bench/soak.sh, or this under `ip netns exec`")
	}
	if err := os.MkdirAll(cfg.root, 0o711); err != nil {
		return nil, err
	}
	os.Chmod(cfg.root, 0o711)
	data, err := os.MkdirTemp(cfg.root, cfg.mode+"-")
	if err != nil {
		return nil, err
	}
	os.Chmod(data, 0o711)
	cfg.key = newKey()
	args := []string{"--templates", cfg.templates, "serve", "--data-dir", data,
		"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--warm", strconv.Itoa(cfg.warm), "--network=" + strconv.FormatBool(cfg.network),
		// Many clients share one key here: the per-key cap (100) would
		// refuse them; --max-sandboxes still holds.
		"--max-sandboxes-per-key", "0",
		"--network-cidr", cfg.prefix}
	args = append(args, strings.Fields(cfg.serveArgs)...)
	p, err := harness.Launch("hutch serve", data+".log", []string{"HUTCH_API_KEY=" + cfg.key}, append([]string{cfg.hutch}, args...)...)
	if err != nil {
		return nil, err
	}
	s := &server{hutch: cfg.hutch, dataDir: data, args: args, p: p}
	deadline := time.Now().Add(time.Minute)
	for {
		b, _ := os.ReadFile(p.Log)
		a, m := servingRe.FindSubmatch(b), metricsRe.FindSubmatch(b)
		if a != nil && m != nil {
			cfg.url = "http://" + string(a[1])
			cfg.metricsURL = "http://" + string(m[1]) + "/metrics"
			break
		}
		if p.Exited() || time.Now().After(deadline) || ctx.Err() != nil {
			s.stop(false)
			return nil, fmt.Errorf("hutch serve did not come up (log %s):\n%s", p.Log, p.LogTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
	cfg.dataDir, cfg.servePid = data, p.Pid()
	return s, nil
}

// stop stops the server and removes its sandboxes (they outlive a server
// by design); remove also deletes its data directory, when no mount is
// left under it.
func (s *server) stop(remove bool) {
	s.p.Stop(30 * time.Second)
	hutch := func(args ...string) (string, error) {
		out, err := exec.Command(s.hutch, append([]string{"--data-dir", s.dataDir}, args...)...).CombinedOutput()
		return string(out), err
	}
	out, err := hutch("ps", "-q")
	if err != nil {
		fmt.Printf("warning: hutch ps: %v: %s\n", err, harness.OneLine(out))
	}
	ids := strings.Fields(out)
	for len(ids) > 0 {
		n := min(100, len(ids))
		if out, err := hutch(append([]string{"rm"}, ids[:n]...)...); err != nil {
			fmt.Printf("warning: hutch rm: %v: %s\n", err, harness.OneLine(out))
		}
		ids = ids[n:]
	}
	if !remove {
		fmt.Printf("data directory kept: %s (log %s)\n", s.dataDir, s.p.Log)
		return
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mi), " "+s.dataDir+"/") {
		fmt.Printf("data directory kept (mounts under it): %s\n", s.dataDir)
		return
	}
	os.RemoveAll(s.dataDir)
	os.Remove(s.p.Log)
	os.Remove(filepath.Dir(s.dataDir)) // the root, when empty
}
