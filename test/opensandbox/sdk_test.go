package opensandbox

import (
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// testSDK runs one SDK's scenario (sdk.py or js/sdk.mjs: the same calls,
// the same step names) and checks each step as a user would: the command's
// output and exit code, the file read back, the search results, the
// endpoint answering, the renewed expiry later than the old, the sandbox
// gone after the kill, seen through E2B's API too.
func (s *suite) testSDK(t *testing.T, client string) {
	tag := unique(client)
	env := s.clientEnv("OSB_TEMPLATE="+template, "OSB_IMAGE="+s.image, "OSB_TAG="+tag, "OSB_HOST_SECRET="+s.secret)
	var lines map[string]line
	switch client {
	case "python":
		lines = s.runScript(t, ".", env, s.python, "sdk.py")
	case "typescript":
		lines = s.runScript(t, s.js, env, nodePath(t), "sdk.mjs")
	}
	d := "/tmp/osb-" + tag
	id := lines["create"].ID
	imageID := lines["create-image"].ID

	checks := []stepCheck{
		{step: "create", check: func(t *testing.T, l line) {
			if l.ID == "" || l.State != "Running" {
				t.Errorf("id %q, state %q; want an id, Running", l.ID, l.State)
			}
			timeAfter(t, "expires_at", l.ExpiresAt, time.Now())
		}},
		{step: "info", check: func(t *testing.T, l line) {
			if l.ID != id || l.State != "Running" || l.Metadata["osbtest"] != tag || deref(l.Image) != template {
				t.Errorf("id %q state %q metadata %v image %q; want %q Running osbtest=%s %q", l.ID, l.State, l.Metadata, deref(l.Image), id, tag, template)
			}
		}},
		{step: "healthy", check: func(t *testing.T, l line) {
			if l.Healthy == nil || !*l.Healthy {
				t.Errorf("healthy %v, want true", l.Healthy)
			}
		}},
		{step: "run", check: wantRun([]string{"hello", "from-create"}, []string{"oops"}, 0)},
		{step: "run-exit", check: wantRun([]string{"before"}, nil, 3)},
		{step: "run-cwd", check: wantRun([]string{"/tmp"}, nil, 0)},
		{step: "mkdir"},
		{step: "write"},
		{step: "read", check: wantContent("alpha beta alpha\n")},
		{step: "read-range", check: wantContent("alpha")},
		{step: "search", check: wantPaths(d + "/a.txt")},
		{step: "move"},
		{step: "search-moved", check: wantPaths(d + "/sub/b.txt")},
		{step: "replace", check: func(t *testing.T, l line) {
			if len(l.Results) != 1 || l.Results[0].Path != d+"/sub/b.txt" || l.Results[0].Replaced != 2 {
				t.Errorf("results %+v, want 2 replaced in %s/sub/b.txt", l.Results, d)
			}
		}},
		{step: "read-replaced", check: wantContent("omega beta omega\n")},
		{step: "delete"},
		{step: "read-deleted", err: 404},
		{step: "rmdir"},
		{step: "rmdir-gone", check: wantRun([]string{"1"}, nil, 0)},
		{step: "hostname", check: func(t *testing.T, l line) {
			if len(l.Stdout) != 1 || deref(l.ExitCode) != 0 {
				t.Errorf("cat /etc/hostname: %q exit %s; want one line", l.Stdout, ptrString(l.ExitCode))
			}
		}},
		{step: "read-traversal", check: func(t *testing.T, l line) {
			// The sandbox's own /etc/hostname, not the host's.
			want := strings.Join(lines["hostname"].Stdout, "\n") + "\n"
			host, _ := os.ReadFile("/etc/hostname")
			if deref(l.Content) != want || deref(l.Content) == string(host) {
				t.Errorf("content %q, want the sandbox's /etc/hostname %q (the host's is %q)", deref(l.Content), want, host)
			}
		}},
		{step: "read-host-secret", err: 404, check: func(t *testing.T, l line) {
			if strings.Contains(l.Error.Message, s.secretText) {
				t.Errorf("the host's file reached the client: %s", l.Error)
			}
		}},
		{step: "endpoint-execd", check: func(t *testing.T, l line) {
			if !strings.Contains(l.Endpoint, id) || !strings.Contains(l.Endpoint, "44772") || !slices.Contains(l.Headers, "X-EXECD-ACCESS-TOKEN") {
				t.Errorf("endpoint %q headers %v; want the sandbox, port 44772, X-EXECD-ACCESS-TOKEN", l.Endpoint, l.Headers)
			}
		}},
		{step: "endpoint-http", check: func(t *testing.T, l line) {
			if deref(l.Status) != 200 || l.Body != "served "+tag+"\n" || !strings.Contains(l.Endpoint, "8080") {
				t.Errorf("GET index.html at %q: %v %q; want 200 %q", l.Endpoint, deref(l.Status), l.Body, "served "+tag+"\n")
			}
		}},
		{step: "metrics", check: func(t *testing.T, l line) {
			// The sandbox's own: the CPU and memory it was created with.
			if l.CPUCount != 1 || l.MemoryTotalMiB != 1024 || l.MemoryUsedMiB <= 0 || l.MemoryUsedMiB > l.MemoryTotalMiB || l.Timestamp <= 0 {
				t.Errorf("metrics cpu %v memory %v/%v MiB at %v; want 1 CPU, 1024 MiB (the create's resource) and memory in use", l.CPUCount, l.MemoryUsedMiB, l.MemoryTotalMiB, l.Timestamp)
			}
		}},
		{step: "renew", check: func(t *testing.T, l line) {
			old := parseTime(t, "old expiry", deref(l.Old))
			timeAfter(t, "new expiry", deref(l.New), old)
			// What get_info says afterwards is the renewed expiry.
			if n, i := parseTime(t, "new", deref(l.New)), parseTime(t, "info", deref(l.Info)); math.Abs(n.Sub(i).Seconds()) > 1 {
				t.Errorf("expiry after the renewal %v, the renewal said %v", i, n)
			}
		}},
		{step: "create-image", check: func(t *testing.T, l line) {
			if l.ID == "" || l.State != "Running" || deref(l.Image) != s.image {
				t.Errorf("id %q state %q image %q; want an id, Running, %q", l.ID, l.State, deref(l.Image), s.image)
			}
		}},
		{step: "image-run", check: wantRun([]string{s.mark, "0"}, nil, 0)},
		{step: "list", check: func(t *testing.T, l line) {
			want := []string{id, imageID}
			slices.Sort(want)
			if diff := cmp.Diff(want, l.IDs); diff != "" || !slices.Equal(l.States, []string{"Running"}) {
				t.Errorf("listed by metadata osbtest=%s: ids (-want +got):\n%sstates %v", tag, diff, l.States)
			}
		}},
		{step: "kill"},
		{step: "info-killed", err: 404},
	}
	judge(t, lines, checks)
	// Killed through OpenSandbox's API, gone from E2B's.
	for _, sid := range []string{id, imageID} {
		if sid == "" {
			continue
		}
		if st := s.e2bStatus(t, sid); st != 404 {
			t.Errorf("E2B's GET /sandboxes/%s after the kill: %d, want 404", sid, st)
		}
	}
}

// wantRun checks a command's output lines and exit code.
func wantRun(stdout, stderr []string, exit int) func(t *testing.T, l line) {
	return func(t *testing.T, l line) {
		if !slices.Equal(l.Stdout, stdout) || !slices.Equal(l.Stderr, stderr) || l.ExitCode == nil || *l.ExitCode != exit {
			t.Errorf("stdout %q stderr %q exit %v; want %q %q %d", l.Stdout, l.Stderr, ptrString(l.ExitCode), stdout, stderr, exit)
		}
	}
}

// wantContent checks a file read back.
func wantContent(want string) func(t *testing.T, l line) {
	return func(t *testing.T, l line) {
		if l.Content == nil || *l.Content != want {
			t.Errorf("content %q, want %q", deref(l.Content), want)
		}
	}
}

// wantPaths checks a search's results.
func wantPaths(want ...string) func(t *testing.T, l line) {
	return func(t *testing.T, l line) {
		if !slices.Equal(l.Paths, want) {
			t.Errorf("found %q, want %q", l.Paths, want)
		}
	}
}

// parseTime parses an RFC 3339 time a client printed.
func parseTime(t *testing.T, what, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Errorf("%s %q: %v", what, s, err)
	}
	return v
}

// timeAfter fails t unless s is a time after after.
func timeAfter(t *testing.T, what, s string, after time.Time) {
	t.Helper()
	if v := parseTime(t, what, s); !v.After(after) {
		t.Errorf("%s %v, want after %v", what, v, after)
	}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// ptrString is an exit code as the messages show it.
func ptrString(p *int) string {
	if p == nil {
		return "none"
	}
	return strconv.Itoa(*p)
}

// nodePath is node, which the JS scripts run on.
func nodePath(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is required: %v", err)
	}
	return node
}
