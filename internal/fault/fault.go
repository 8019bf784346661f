// Package fault is a test hook: named points between the durable effects
// of an operation (a record written, a runtime sandbox started or stopped,
// files captured) where `hutch serve` kills itself with SIGKILL, exactly
// as `kill -9` from outside would, when the point is armed.
//
// Points are armed by the environment variable HUTCH_FAULT of `hutch
// serve` (Env), read once at start into a Points value passed down to the
// packages that have the points; the zero value arms none and costs a nil
// check. Every point's name is one of Steps, so that a test looping over
// Steps reaches every point (test/faults), and test/repo checks that no
// point is named outside it.
package fault

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
)

// Env is the environment variable of `hutch serve` that arms points: a
// comma-separated list of Steps. It is a test hook; a server run with it
// dies at the first armed point it reaches.
const Env = "HUTCH_FAULT"

// The points. Each name is "<operation>.<what is durable by then>"; the
// operations are those of the API (create, kill, pause, resume, snapshot,
// fork) and template builds (build).
const (
	// CreateStarted: the runtime sandbox of a create runs (native: its
	// record, cgroup and init; gvisor: its shim and runsc), its envd
	// answers, nothing is recorded in the store.
	CreateStarted = "create.started"
	// CreateInitialized: envd got the sandbox's /init (its token,
	// environment), it is live in the manager, not yet in the store.
	CreateInitialized = "create.initialized"
	// CreateRecorded: the store has the sandbox; the client has no
	// answer yet.
	CreateRecorded = "create.recorded"
	// NativeCreateClaimed: the native runtime made the sandbox's
	// directory, wrote a first record and claimed its uid range; no
	// cgroup, no process yet.
	NativeCreateClaimed = "native.create.claimed"
	// NativeCreateRecorded: the native runtime wrote the sandbox's state
	// and made its cgroup and directories; no process runs yet.
	NativeCreateRecorded = "native.create.recorded"
	// NativeCreateInit: the native runtime's init process runs and is
	// recorded; its mounts are not made yet.
	NativeCreateInit = "native.create.init"
	// KillUnrecorded: a kill deleted the store's record; the runtime
	// sandbox still runs.
	KillUnrecorded = "kill.unrecorded"
	// KillStopped: the runtime sandbox is deleted too; what it was paused
	// with (a checkpoint, a paused build) is not removed yet.
	KillStopped = "kill.stopped"
	// PauseFrozen: a pause froze the sandbox (cgroup freezer); nothing
	// is recorded.
	PauseFrozen = "pause.frozen"
	// PauseCaptured: a pause without memory made the build of its files
	// in the template store; the record still says running.
	PauseCaptured = "pause.captured"
	// PauseCheckpointed: a pause with memory (gvisor) saved the
	// checkpoint to disk; the record still says running.
	PauseCheckpointed = "pause.checkpointed"
	// PauseRecorded: the record says paused; the runtime sandbox is not
	// deleted yet.
	PauseRecorded = "pause.recorded"
	// ResumeStarted: a resume of a sandbox paused with its files started
	// its runtime sandbox; the record still says paused.
	ResumeStarted = "resume.started"
	// ResumeRestored: a resume of a checkpoint (gvisor) restored its
	// runtime sandbox; the record still says paused.
	ResumeRestored = "resume.restored"
	// ResumeThawed: a resume of a sandbox frozen in place thawed it; the
	// record still says paused.
	ResumeThawed = "resume.thawed"
	// ResumeRecorded: the record says running again; the paused files or
	// checkpoint are not removed yet.
	ResumeRecorded = "resume.recorded"
	// SnapshotCaptured: a snapshot's build is in the template store; the
	// client has no answer yet.
	SnapshotCaptured = "snapshot.captured"
	// ForkCaptured: a fork captured its source into an untagged build; no
	// fork is started yet.
	ForkCaptured = "fork.captured"
	// ForkCreated: the first fork is created and recorded; the capture
	// is not removed yet.
	ForkCreated = "fork.created"
	// BuildScratch: a build step's scratch build (the layers so far) is
	// in the template store, untagged; its sandbox is not started yet.
	BuildScratch = "build.scratch"
	// BuildLayer: a build step's layer is captured into the template
	// store and cached; the template is not committed.
	BuildLayer = "build.layer"
	// BuildCommitted: the built template is committed under its name and
	// tags; the build's status still says building.
	BuildCommitted = "build.committed"
)

// Steps are every point, in the order of the operations' steps.
var Steps = []string{
	CreateStarted, CreateInitialized, CreateRecorded,
	NativeCreateClaimed, NativeCreateRecorded, NativeCreateInit,
	KillUnrecorded, KillStopped,
	PauseFrozen, PauseCaptured, PauseCheckpointed, PauseRecorded,
	ResumeStarted, ResumeRestored, ResumeThawed, ResumeRecorded,
	SnapshotCaptured,
	ForkCaptured, ForkCreated,
	BuildScratch, BuildLayer, BuildCommitted,
}

// Points are the armed points of a server; the zero value arms none.
type Points struct {
	armed []string
}

// Parse arms the points of spec, a comma-separated list of Steps (Env's
// value); "" arms none. A name not in Steps is an error: a typo must not
// leave a test believing it injected a fault.
func Parse(spec string) (Points, error) {
	var p Points
	for _, name := range strings.Split(spec, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if !slices.Contains(Steps, name) {
			return Points{}, fmt.Errorf("%s: no fault point %q (there are %s)", Env, name, strings.Join(Steps, ", "))
		}
		p.armed = append(p.armed, name)
	}
	return p, nil
}

// Armed reports whether any point is armed.
func (p Points) Armed() bool { return len(p.armed) > 0 }

// At kills this process with SIGKILL when step is armed, and returns
// otherwise. SIGKILL, not a panic or an exit: nothing deferred runs, no
// file is flushed, as with `kill -9`.
func (p Points) At(step string) {
	if len(p.armed) == 0 || !slices.Contains(p.armed, step) {
		return
	}
	// Said first, so that a test's log shows where the server died.
	fmt.Fprintf(os.Stderr, "fault: killed at %s\n", step)
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is delivered before any other step runs
}
