package remotecli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVolumes drives hutch volume and sandbox create --volume against a
// real server: put, mount in two sandboxes, owners, get, rm refused while
// mounted, rm.
func TestVolumes(t *testing.T) {
	f := newFixture(t)
	id := strings.TrimSpace(f.ok(t, "volume", "create", "data"))
	if id == "" {
		t.Fatal("volume create printed no id")
	}
	wantFailure(t, f.hutch(t, "", "volume", "create", "data"), 1, "exists")
	wantFailure(t, f.hutch(t, "", "volume", "create", "no/slash"), 1, "invalid volume name")
	if got := f.ok(t, "volume", "ls", "-q"); got != id+"\n" {
		t.Errorf("volume ls -q = %q, want %q", got, id+"\n")
	}
	if r := f.hutch(t, "seeded\n", "volume", "put", "data", "-", "/in/seed.txt", "--uid", "1000", "--gid", "1000"); r.Code != 0 {
		t.Fatalf("volume put: %s", r)
	}
	wantFailure(t, f.hutch(t, "", "sandbox", "create", "--volume", "nosuch:/mnt/x"), 1, "not found")
	wantFailure(t, f.hutch(t, "", "sandbox", "create", "--volume", "data:/proc/x"), 1, "/proc")

	a := f.createSandbox(t, "--volume", "data:/mnt/data")
	b := f.createSandbox(t, "--volume", "data:/srv/shared")
	if got := f.ok(t, "exec", a, "--", "cat /mnt/data/in/seed.txt; stat -c %u /mnt/data/in/seed.txt"); got != "seeded\n1000\n" {
		t.Errorf("sandbox a sees %q", got)
	}
	f.ok(t, "exec", a, "--", "echo from-a > /mnt/data/a.txt")
	if got := f.ok(t, "exec", b, "--", "cat /srv/shared/a.txt; stat -c %U /srv/shared/a.txt"); got != "from-a\nuser\n" {
		t.Errorf("sandbox b sees %q, want a's file owned by user", got)
	}
	local := filepath.Join(t.TempDir(), "a.txt")
	f.ok(t, "volume", "get", "data", "/a.txt", local)
	if b, err := os.ReadFile(local); err != nil || string(b) != "from-a\n" {
		t.Errorf("volume get = %q, %v", b, err)
	}
	wantFailure(t, f.hutch(t, "", "volume", "rm", "data"), 1, "mounted")
	f.ok(t, "sandbox", "kill", a, b)
	if got := f.ok(t, "volume", "get", id, "/a.txt", "-"); got != "from-a\n" {
		t.Errorf("after the sandboxes: volume get = %q", got)
	}
	if got := f.ok(t, "volume", "rm", "data"); got != id+"\n" {
		t.Errorf("volume rm = %q", got)
	}
	if got := f.ok(t, "volume", "ls", "-q"); got != "" {
		t.Errorf("volume ls after rm = %q", got)
	}
}
