package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
)

// newFlags defines the harness's flags on cfg.
func newFlags(cfg *config) *flag.FlagSet {
	fs := flag.CommandLine
	fs.StringVar(&cfg.hutch, "hutch", "/usr/local/bin/hutch", "the hutch binary (hutch-sandbox beside it)")
	fs.StringVar(&cfg.dir, "dir", "", "work directory: the servers' data directories and logs (required)")
	fs.StringVar(&cfg.templates, "templates", harness.TemplatesDir(), "the template store")
	fs.StringVar(&cfg.osbPython, "osb-python", "", "python of the venv with OpenSandbox's SDK (test/opensandbox/requirements.txt; required)")
	fs.StringVar(&cfg.e2bPython, "e2b-python", "", "python of the venv with E2B's SDK (test/e2bpy/requirements.txt; required)")
	fs.StringVar(&cfg.worker, "worker", "", "bench/opensandbox/worker.py (required)")
	fs.IntVar(&cfg.n, "n", 300, "measured operations per path in each running-sandbox row")
	fs.IntVar(&cfg.nCreate, "n-create", 100, "measured creates per path in each create row, per server")
	fs.IntVar(&cfg.warmup, "warmup", 20, "warm-up operations per path in each running-sandbox row (not measured)")
	fs.IntVar(&cfg.warmupCreate, "warmup-create", 3, "warm-up creates per path in each create row (not measured)")
	fs.IntVar(&cfg.warm, "warm", 4, "hutch serve's default warm pool (not set: told, to wait for its refills)")
	fs.DurationVar(&cfg.settle, "settle", 100*time.Millisecond, "wait before each create, after the warm pool refilled")
	fs.StringVar(&cfg.only, "only", "", "comma-separated sections ("+strings.Join(sectionKeys, ",")+"); default all")
	return fs
}

// rawCreate is one create → first command without an SDK, the kill after
// the clock: OpenSandbox's POST /v1/sandboxes (202), GET of the execd
// endpoint, POST /command; E2B's POST /v2/sandboxes (201), envd's Start
// through the edge. sdkDefaults adds to OpenSandbox's create what its
// Python SDK sends when given only an image.
func (b *bench) rawCreate(s *server, sdkDefaults bool) abOp {
	// One client per path, kept alive across iterations as an SDK's is.
	osbHC := &http.Client{Transport: newTransport()}
	e2bRT := newTransport()
	return func(ctx context.Context, side int) (sample, error) {
		t0 := time.Now()
		var id, kill string
		var created time.Duration
		var err error
		if side == osbSide {
			if id, err = b.createOSB(ctx, s, sdkDefaults); err != nil {
				return sample{}, err
			}
			kill = "/v1/sandboxes/" + id
			created = time.Since(t0)
			var ex *execd
			if ex, err = b.newExecd(ctx, s, osbHC, id); err == nil {
				_, err = ex.run(ctx, "true")
			}
		} else {
			sb, cerr := b.createE2B(ctx, s)
			if cerr != nil {
				return sample{}, cerr
			}
			id, kill = sb.SandboxID, "/sandboxes/"+sb.SandboxID
			created = time.Since(t0)
			_, err = newEnvd(s, e2bRT, id, sb.EnvdAccessToken).run(ctx, rawUser, "/bin/bash", "-c", "true")
		}
		total := time.Since(t0)
		if kerr := b.api(ctx, s, http.MethodDelete, kill, nil, http.StatusNoContent, nil); kerr != nil && err == nil {
			err = fmt.Errorf("kill %s: %w", id, kerr)
		}
		if err != nil {
			return sample{}, err
		}
		return sample{total: total, clientCPU: -1, parts: map[string]time.Duration{
			"1 create (POST)": created, "2 first command (OSB: endpoint + POST /command)": total - created}}, nil
	}
}

// newTransport is a transport of one kept-alive connection per host, as
// the SDKs' clients keep theirs.
func newTransport() *http.Transport {
	return &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute, DisableCompression: true}
}

// rawRunning measures the raw rows in the running sandbox id: a command,
// uploads and downloads of 4 KiB and 1 MiB, through execd's endpoint and
// through envd at the edge.
func (b *bench) rawRunning(s *server, id, token string) ([]section, error) {
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	ex, err := b.newExecd(ctx, s, &http.Client{Transport: newTransport()}, id)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("the execd endpoint of %s: %w", id, err)
	}
	ev := newEnvd(s, newTransport(), id, token)
	cpu := threadCPU(s.Pid())
	cmd := section{title: "command round trip from Go, no SDK: execd's POST /command (SSE) vs envd's process.Start (Connect) through the edge, the same process"}
	cmd.rows = append(cmd.rows,
		b.runAB("`true` (both: /bin/bash -c true as root)", b.cfg.n, b.cfg.warmup, cpu, func(ctx context.Context, side int) (sample, error) {
			var d time.Duration
			var err error
			if side == osbSide {
				d, err = ex.run(ctx, "true")
			} else {
				d, err = ev.run(ctx, rawUser, "/bin/bash", "-c", "true")
			}
			return sample{total: d, clientCPU: -1}, err
		}, nil),
		b.runAB("`true`, envd as E2B's SDKs ask (/bin/bash -l -c true as user)", b.cfg.n, b.cfg.warmup, cpu, func(ctx context.Context, side int) (sample, error) {
			var d time.Duration
			var err error
			if side == osbSide {
				d, err = ex.run(ctx, "true")
			} else {
				d, err = ev.run(ctx, "user", "/bin/bash", "-l", "-c", "true")
			}
			return sample{total: d, clientCPU: -1}, err
		}, nil))
	files := section{title: "files from Go, no SDK: execd's POST /files/upload (multipart: metadata + file) and GET /files/download vs envd's POST /files (multipart) and GET /files through the edge"}
	for _, size := range []int{4 << 10, 1 << 20} {
		data := []byte(strings.Repeat("abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijk\n", size/64+1)[:size])
		path := [2]string{fmt.Sprintf("/tmp/osbbench-raw-osb-%d", size), fmt.Sprintf("/tmp/osbbench-raw-e2b-%d", size)}
		modes := []int{755}
		if size == 1<<20 {
			modes = append(modes, 0)
		}
		for _, mode := range modes {
			name := fmt.Sprintf("upload %s (metadata mode 755, the SDKs' default)", sizeName(size))
			if mode == 0 {
				name = fmt.Sprintf("upload %s (metadata without a mode)", sizeName(size))
			}
			files.rows = append(files.rows, b.runAB(name, b.cfg.n, b.cfg.warmup, cpu, func(ctx context.Context, side int) (sample, error) {
				var d time.Duration
				var err error
				if side == osbSide {
					d, err = ex.upload(ctx, path[side], data, mode)
				} else {
					d, err = ev.upload(ctx, path[side], data)
				}
				return sample{total: d, clientCPU: -1}, err
			}, nil))
		}
		files.rows = append(files.rows, b.runAB("download "+sizeName(size), b.cfg.n, b.cfg.warmup, cpu, func(ctx context.Context, side int) (sample, error) {
			var d time.Duration
			var err error
			if side == osbSide {
				d, err = ex.download(ctx, path[side], size)
			} else {
				d, err = ev.download(ctx, path[side], size)
			}
			return sample{total: d, clientCPU: -1}, err
		}, nil))
	}
	return []section{cmd, files}, nil
}
