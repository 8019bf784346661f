package sandbox

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/envdapi"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// counter starts, in sandbox id, a shell that adds one to a number in
// its memory every 100 ms and writes it to /tmp/count.
func counter(t *testing.T, m *Manager, id string) {
	t.Helper()
	if _, err := run(t, m, id, "", `nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done' >/dev/null 2>&1 & sleep 0.5`); err != nil {
		t.Fatal(err)
	}
}

// count reads the counter's number (again, when it caught the file
// between the shell's truncation and its write).
func count(t *testing.T, m *Manager, id string) int {
	t.Helper()
	var out string
	for range 20 {
		var err error
		if out, err = run(t, m, id, "", "cat /tmp/count"); err != nil {
			t.Fatal(err)
		}
		if n, err := strconv.Atoi(strings.TrimSpace(out)); err == nil {
			return n
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("/tmp/count = %q", out)
	return 0
}

// TestPauseKeepsMemory: a paused sandbox is frozen in place: a process
// counting in its memory stops counting while paused and goes on from
// where it was after the resume (Connect), with the same id; while paused
// the sandbox is listed paused, nothing routes to it, a second pause is
// refused, and it gives its running slot back for a frozen one: another
// sandbox of the key runs beside it, but it cannot be resumed while that
// one runs, nor can another be paused with its memory.
func TestPauseKeepsMemory(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := e.managerWith(t, Options{MaxPerKey: 1})
	sb, err := m.Create(ctx, CreateRequest{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	counter(t, m, sb.ID)
	before := count(t, m, sb.ID)
	if err := m.Pause(ctx, "", sb.ID, true); err != nil {
		t.Fatal(err)
	}
	if err := m.Pause(ctx, "", sb.ID, true); !errors.Is(err, ErrAlreadyPaused) {
		t.Errorf("a second pause = %v, want ErrAlreadyPaused", err)
	}
	if err := m.Pause(ctx, "", sb.ID, false); !errors.Is(err, ErrAlreadyPaused) {
		t.Errorf("a pause without memory of a paused sandbox = %v, want ErrAlreadyPaused", err)
	}
	got, err := m.Get(ctx, "", sb.ID)
	if err != nil || got.State != StatePaused {
		t.Fatalf("Get of the paused sandbox = %+v, %v", got, err)
	}
	if _, ok := m.Transport(sb.ID, envdapi.Port); ok {
		t.Error("a paused sandbox is routable")
	}
	// Its running slot is free: another sandbox of the key runs beside it.
	other, err := m.Create(ctx, CreateRequest{Timeout: time.Minute})
	if err != nil {
		t.Fatalf("a create beside a paused sandbox: %v", err)
	}
	var le *LimitError
	if _, _, err := m.Connect(ctx, "", sb.ID, time.Minute); !errors.As(err, &le) || le.Frozen {
		t.Errorf("a resume past the running cap = %v, want a LimitError", err)
	}
	if err := m.Pause(ctx, "", other.ID, true); !errors.As(err, &le) || !le.Frozen {
		t.Errorf("a pause with memory past the frozen cap = %v, want a LimitError for paused sandboxes", err)
	}
	if got, _ := m.Get(ctx, "", other.ID); got == nil || got.State != StateRunning {
		t.Errorf("a refused pause left %+v", got)
	}
	if err := m.Kill(ctx, "", other.ID); err != nil {
		t.Fatal(err)
	}
	// A paused sandbox has no expiry: a timeout or a refresh does not
	// arm one (review 13: a paused sandbox was killed by its timer).
	if err := m.SetTimeout(ctx, "", sb.ID, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := m.Refresh(ctx, "", sb.ID, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // 15 counts, were it running
	if got, err := m.Get(ctx, "", sb.ID); err != nil || got.State != StatePaused {
		t.Fatalf("a paused sandbox given a short timeout: %+v, %v; want still paused", got, err)
	}
	resumed, wasPaused, err := m.Connect(ctx, "", sb.ID, time.Minute)
	if err != nil || !wasPaused || resumed.ID != sb.ID || resumed.State != StateRunning {
		t.Fatalf("Connect of the paused sandbox = %+v, resumed %v, %v", resumed, wasPaused, err)
	}
	after := count(t, m, sb.ID)
	if after < before || after > before+6 {
		t.Errorf("the count went from %d to %d across a 1.5 s pause; a frozen process counts on from where it was", before, after)
	}
	time.Sleep(400 * time.Millisecond)
	if again := count(t, m, sb.ID); again <= after {
		t.Errorf("after the resume the count stays at %d: the process does not run", again)
	}
	if _, again, err := m.Connect(ctx, "", sb.ID, time.Minute); err != nil || again {
		t.Errorf("Connect of the running sandbox: resumed %v, %v; want a plain connect", again, err)
	}
}

// TestPausedSurvivesRestart: a server that goes away (and comes back on
// the same store) finds a paused sandbox paused, and resumes it with its
// process where it was; an unknown one is not found.
func TestPausedSurvivesRestart(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	first := e.manager(t)
	sb, err := first.Create(ctx, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	counter(t, first, sb.ID)
	before := count(t, first, sb.ID)
	if err := first.Pause(ctx, "", sb.ID, true); err != nil {
		t.Fatal(err)
	}
	first.Close()
	time.Sleep(time.Second)

	second := e.manager(t)
	if err := second.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := second.Get(ctx, "", sb.ID)
	if err != nil || got.State != StatePaused {
		t.Fatalf("after the restart: %+v, %v; want paused", got, err)
	}
	if _, _, err := second.Connect(ctx, "", sb.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	if after := count(t, second, sb.ID); after < before || after > before+6 {
		t.Errorf("the count went from %d to %d across a pause and a restart", before, after)
	}
	if err := second.Pause(ctx, "", "no-such-sandbox", true); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("pause of an unknown sandbox = %v, want not found", err)
	}
}

// TestAutoPauseAndWake: a sandbox made to pause at its timeout is paused
// then, not killed, and one made to resume on traffic is resumed by Wake
// (what the edge router calls), its process where it was; one without
// autoResume is not.
func TestAutoPauseAndWake(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := e.manager(t)
	wakes, err := m.Create(ctx, CreateRequest{Timeout: time.Second, Lifecycle: Lifecycle{OnTimeout: OnTimeoutPause, AutoResume: true}})
	if err != nil {
		t.Fatal(err)
	}
	sleeps, err := m.Create(ctx, CreateRequest{Timeout: time.Second, Lifecycle: Lifecycle{OnTimeout: OnTimeoutPause}})
	if err != nil {
		t.Fatal(err)
	}
	counter(t, m, wakes.ID)
	time.Sleep(2500 * time.Millisecond)
	for _, id := range []string{wakes.ID, sleeps.ID} {
		got, err := m.Get(ctx, "", id)
		if err != nil || got.State != StatePaused {
			t.Fatalf("at its timeout %s is %+v, %v; want paused", id, got, err)
		}
	}
	if m.Wake(ctx, sleeps.ID) {
		t.Error("Wake resumed a sandbox made without autoResume")
	}
	if !m.Wake(ctx, wakes.ID) {
		t.Fatal("Wake did not resume a sandbox made with autoResume")
	}
	got, err := m.Get(ctx, "", wakes.ID)
	if err != nil || got.State != StateRunning || time.Until(got.EndAt) < DefaultTimeout-time.Minute {
		t.Errorf("after Wake: %+v, %v; want running for DefaultTimeout", got, err)
	}
	if n := count(t, m, wakes.ID); n < 1 || n > 30 {
		t.Errorf("the count after the wake is %d", n)
	}
}

// TestWakesAtOnce: requests that arrive together for one paused sandbox
// made to resume on traffic all get it running (one resumes, the others
// wait for it), none is told it is gone (review 14).
func TestWakesAtOnce(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := e.manager(t)
	sb, err := m.Create(ctx, CreateRequest{Timeout: time.Minute, Lifecycle: Lifecycle{OnTimeout: OnTimeoutPause, AutoResume: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Pause(ctx, "", sb.ID, true); err != nil {
		t.Fatal(err)
	}
	woke := make(chan bool)
	for range 6 {
		go func() { woke <- m.Wake(ctx, sb.ID) }()
	}
	for range 6 {
		if !<-woke {
			t.Error("a wake that came with others was refused")
		}
	}
	if got, err := m.Get(ctx, "", sb.ID); err != nil || got.State != StateRunning {
		t.Errorf("after the wakes: %+v, %v", got, err)
	}
}
