package native

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// newUIDTestRuntime returns a runtime whose uid registry and sub-id files
// are private to the test; subid is the content of its /etc/subuid.
func newUIDTestRuntime(t *testing.T, registry, subid string) *Runtime {
	t.Helper()
	dir := t.TempDir()
	sub := filepath.Join(dir, "subuid")
	if err := os.WriteFile(sub, []byte(subid), 0o644); err != nil {
		t.Fatal(err)
	}
	rt := &Runtime{dataDir: filepath.Join(dir, "data"), uidRegistry: registry, subIDFiles: []string{sub, filepath.Join(dir, "no-subgid")}}
	if err := os.MkdirAll(filepath.Join(rt.dataDir, "sandboxes"), 0o711); err != nil {
		t.Fatal(err)
	}
	return rt
}

// claim makes a sandbox directory, as Create does, and claims a slot.
func claim(t *testing.T, rt *Runtime, id string) int {
	t.Helper()
	if err := os.MkdirAll(rt.sandboxDir(id), 0o711); err != nil {
		t.Fatal(err)
	}
	slot, err := rt.claimSlot(id)
	if err != nil {
		t.Fatalf("claimSlot(%s): %v", id, err)
	}
	return slot
}

func TestClaimSlotSkipsSubIDRanges(t *testing.T) {
	tests := []struct {
		name   string
		subid  string
		want   int
		reason string
	}{
		{"none", "", 0, "the first slot"},
		{"below the base", "user:100000:65536\n", 0, "100000+65536 < 1048576"},
		{"the first slot", "user:1048576:65536\n", 1, "slot 0 is user's"},
		{"straddling", "a:1048000:1000\nb:1114112:10\n", 2, "slots 0 and 1 overlap"},
		{"LXD's million", "root:1000000:1000000000\n", (1000000 + 1000000000 - uidBase + uidRange - 1) / uidRange, "everything up to 1001000000"},
		{"comments and junk", "# root:1048576:65536\nnot a line\nx:y:z\n", 0, "nothing parsed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := newUIDTestRuntime(t, t.TempDir(), tt.subid)
			if got := claim(t, rt, "sbx"); got != tt.want {
				t.Errorf("slot %d, want %d (%s)", got, tt.want, tt.reason)
			}
		})
	}
}

// TestClaimSlotHostWide: runtimes with different data dirs share the
// registry and never get the same range, also when claiming at once.
func TestClaimSlotHostWide(t *testing.T) {
	registry := t.TempDir()
	rts := []*Runtime{newUIDTestRuntime(t, registry, ""), newUIDTestRuntime(t, registry, "")}
	var mu sync.Mutex
	slots := map[int]string{}
	var wg sync.WaitGroup
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rt := rts[i%2]
			id := fmt.Sprintf("sbx-%d", i)
			if err := os.MkdirAll(rt.sandboxDir(id), 0o711); err != nil {
				t.Error(err)
				return
			}
			slot, err := rt.claimSlot(id)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if other, ok := slots[slot]; ok {
				t.Errorf("slot %d given to %s and %s", slot, other, id)
			}
			slots[slot] = id
		}()
	}
	wg.Wait()
	// Released ranges are reused; another sandbox's claim is not released.
	slotOf := map[string]int{}
	for slot, id := range slots {
		slotOf[id] = slot
	}
	rts[0].releaseSlot(slotOf["sbx-0"], "sbx-0")
	rts[0].releaseSlot(slotOf["sbx-1"], "sbx-1") // sbx-1 is the other runtime's
	if got := claim(t, rts[1], "again"); got != slotOf["sbx-0"] {
		t.Errorf("after release: slot %d, want %d, the released one", got, slotOf["sbx-0"])
	}
	if _, err := os.Stat(filepath.Join(registry, fmt.Sprint(slotOf["sbx-1"]))); err != nil {
		t.Errorf("a release by the wrong runtime removed sbx-1's claim: %v", err)
	}
}

// TestClaimSlotTakesBackStaleClaims: when no range is free, claims of
// sandboxes whose directory is gone are taken back; live ones and ones
// being made (a directory without a record) are not.
func TestClaimSlotTakesBackStaleClaims(t *testing.T) {
	registry := t.TempDir()
	// Only slots 0, 1 and 2 are free on this "host".
	rt := newUIDTestRuntime(t, registry, fmt.Sprintf("all:%d:%d\n", uidBase+3*uidRange, uidCeiling))
	for i, id := range []string{"alive", "gone", "making"} {
		if got := claim(t, rt, id); got != i {
			t.Fatalf("%s: slot %d, want %d", id, got, i)
		}
	}
	if err := rt.writeRecord(&record{ID: "alive", Slot: 0}); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(rt.sandboxDir("gone")) // its data dir deleted by hand
	if got := claim(t, rt, "new"); got != 1 {
		t.Errorf("slot %d, want 1, the gone sandbox's", got)
	}
	if err := os.MkdirAll(rt.sandboxDir("more"), 0o711); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.claimSlot("more"); err == nil {
		t.Error("a claim succeeded with every range taken by a live sandbox")
	}
}

// TestAdoptLegacyClaims: claims an older Hutch kept in the data dir move to
// the host-wide registry for sandboxes that still exist, and are dropped
// for the others.
func TestAdoptLegacyClaims(t *testing.T) {
	registry := t.TempDir()
	rt := newUIDTestRuntime(t, registry, "")
	legacy := filepath.Join(rt.dataDir, "uids")
	if err := os.MkdirAll(legacy, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(rt.sandboxDir("old-alive"), 0o711); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(legacy, "0"), []byte("old-alive"), 0o600)
	os.WriteFile(filepath.Join(legacy, "1"), []byte("old-gone"), 0o600)
	rt.adoptLegacyClaims()
	if b, err := os.ReadFile(filepath.Join(registry, "0")); err != nil || string(b) != rt.sandboxDir("old-alive") {
		t.Errorf("registry claim of slot 0 = %q, %v; want the old sandbox's directory", b, err)
	}
	if _, err := os.Stat(filepath.Join(registry, "1")); err == nil {
		t.Error("a gone sandbox's legacy claim was adopted")
	}
	if _, err := os.Stat(legacy); err == nil {
		t.Error("the legacy claims directory is left")
	}
	if got := claim(t, rt, "new"); got != 1 {
		t.Errorf("a new sandbox got slot %d, want 1 (0 is the old sandbox's)", got)
	}
}
