package sandbox

import (
	"context"
	"errors"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/runtime"
)

// createAll runs n creates for keyID at once and returns the sandboxes
// made and the errors of the others.
func createAll(m *Manager, keyID string, n int) (made []*Sandbox, errs []error) {
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for range n {
		wg.Go(func() {
			rec, err := m.Create(context.Background(), CreateRequest{KeyID: keyID})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			made = append(made, rec)
		})
	}
	wg.Wait()
	return made, errs
}

// wantLimit fails unless every error is the cap named.
func wantLimit(t *testing.T, errs []error, want LimitError) {
	t.Helper()
	for _, err := range errs {
		var le *LimitError
		if !errors.As(err, &le) || *le != want || !errors.Is(err, errdefs.ErrResourceExhausted) {
			t.Errorf("refused create: %v, want %+v (resource exhausted)", err, want)
		}
	}
}

// TestCreateCaps: concurrent creates never run more sandboxes than the
// caps allow, per key and in all (review A10: 18 creates with one key in
// 3 s were all accepted); a killed sandbox or a failed create gives its
// slot back; a restarted manager counts the sandboxes it adopts.
func TestCreateCaps(t *testing.T) {
	e := newEnv(t)
	m := e.managerWith(t, Options{MaxPerKey: 2, MaxSandboxes: 3})
	ctx := context.Background()
	keys := map[string]string{}
	for _, name := range []string{"a", "b", "c"} {
		_, k, err := e.st.CreateKey(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		keys[name] = k.ID
	}

	a, errs := createAll(m, keys["a"], 8)
	if len(a) != 2 || len(errs) != 6 {
		t.Fatalf("8 creates at once with a cap of 2 per key: %d made, %d refused (%v)", len(a), len(errs), errs)
	}
	wantLimit(t, errs, LimitError{Limit: 2, PerKey: true})
	b, errs := createAll(m, keys["b"], 8)
	if len(b) != 1 || len(errs) != 7 {
		t.Fatalf("8 creates at once with 1 of 3 slots left: %d made, %d refused (%v)", len(b), len(errs), errs)
	}
	wantLimit(t, errs, LimitError{Limit: 3})
	if key, total := m.running(keys["a"]); key != 2 || total != 3 {
		t.Errorf("running: key a %d, total %d; want 2, 3", key, total)
	}
	if all, _ := e.st.AllSandboxes(ctx); len(all) != 3 {
		t.Errorf("%d sandboxes recorded, want 3", len(all))
	}

	// A killed sandbox gives its slot back.
	if err := m.Kill(ctx, keys["a"], a[0].ID); err != nil {
		t.Fatal(err)
	}
	if key, total := m.running(keys["a"]); key != 1 || total != 2 {
		t.Errorf("after a kill: key a %d, total %d; want 1, 2", key, total)
	}
	// So does a create that fails after taking its slot.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := m.Create(cancelled, CreateRequest{KeyID: keys["b"]}); err == nil || errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("a create with a cancelled context: %v, want its own failure", err)
	}
	if key, total := m.running(keys["b"]); key != 1 || total != 2 {
		t.Errorf("after a failed create: key b %d, total %d; want 1, 2", key, total)
	}
	// And one that fails at the very end, when it is recorded (an unknown
	// key): nothing of it stays live.
	if _, err := m.Create(ctx, CreateRequest{KeyID: "key_gone"}); err == nil {
		t.Fatal("a create for an unknown key was recorded")
	}
	if key, total := m.running("key_gone"); key != 0 || total != 2 {
		t.Errorf("after a create that failed to be recorded: its key %d, total %d; want 0, 2", key, total)
	}
	m.mu.Lock()
	nlive := len(m.live)
	m.mu.Unlock()
	if nlive != 2 {
		t.Errorf("%d sandboxes live, want 2", nlive)
	}
	again, err := m.Create(ctx, CreateRequest{KeyID: keys["a"]})
	if err != nil {
		t.Fatalf("a create after a kill made room: %v", err)
	}

	// A restarted server counts what it adopts, even past a lowered cap,
	// and kills none of it.
	m.Close()
	second := e.managerWith(t, Options{MaxPerKey: 1, MaxSandboxes: 10})
	if err := second.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if key, total := second.running(keys["a"]); key != 2 || total != 3 {
		t.Errorf("after Recover: key a %d, total %d; want 2, 3", key, total)
	}
	if _, err := second.Create(ctx, CreateRequest{KeyID: keys["a"]}); !errors.As(err, new(*LimitError)) {
		t.Errorf("a create past the lowered cap: %v, want a limit error", err)
	}
	if _, err := second.Get(ctx, keys["a"], again.ID); err != nil {
		t.Errorf("an adopted sandbox past the lowered cap: %v", err)
	}
	// A key with no sandbox has its slot.
	if _, err := second.Create(ctx, CreateRequest{KeyID: keys["c"]}); err != nil {
		t.Errorf("another key's create: %v", err)
	}
}

func TestCheckResources(t *testing.T) {
	m := &Manager{maxResources: maxResources(runtime.Resources{}, runtime.Resources{})}
	most := goruntime.NumCPU() * 1000
	for _, tc := range []struct {
		name string
		r    Resources
		want string // "" for no error, else a part of it
	}{
		{"none", Resources{}, ""},
		{"half a core", Resources{CPUMillis: 500}, ""},
		{"every core", Resources{CPUMillis: most}, ""},
		{"a tenth", Resources{CPUMillis: 100}, ""},
		{"too little cpu", Resources{CPUMillis: 99}, "want 100m"},
		{"more cores than the host", Resources{CPUMillis: most + 1}, "this server's bound"},
		{"512 MiB", Resources{MemoryMB: 512}, ""},
		{"too little memory", Resources{MemoryMB: 63}, "want 64 MiB"},
		{"more memory than the host", Resources{MemoryMB: 1 << 30}, "this server's bound"},
	} {
		err := m.CheckResources(tc.r)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errdefs.IsInvalidArgument(err)):
			t.Errorf("%s: got %v, want an invalid argument saying %q", tc.name, err, tc.want)
		}
	}
}

func TestCheckEntrypoint(t *testing.T) {
	long := make([]string, maxEntrypointArgs+1)
	for i := range long {
		long[i] = "x"
	}
	for _, tc := range []struct {
		name string
		argv []string
		ok   bool
	}{
		{"none", nil, true},
		{"tail", []string{"tail", "-f", "/dev/null"}, true},
		{"empty program", []string{"", "x"}, false},
		{"too many arguments", long, false},
		{"too many bytes", []string{strings.Repeat("x", maxEntrypointBytes+1)}, false},
	} {
		if err := CheckEntrypoint(tc.argv); (err == nil) != tc.ok || (err != nil && !errdefs.IsInvalidArgument(err)) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}
