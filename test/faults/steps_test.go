package faults

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/fault"
	"github.com/hutch-sandbox/hutch/sdk"
)

// The operations a step case drives, and how the sandbox is paused before
// (prep).
const (
	opCreate     = "create"
	opKill       = "kill"
	opPause      = "pause"       // keeping memory: frozen (native), a checkpoint (gvisor)
	opPauseFiles = "pause-files" // its files only
	opResume     = "resume"
	opSnapshot   = "snapshot"
	opFork       = "fork"
	opBuild      = "build"
)

// stepCase is one way to reach a fault point: the operation, on a backend,
// of a sandbox paused (prep: opPause, opPauseFiles) or running ("").
type stepCase struct {
	backend, prep, op string
}

// both is the case on each backend.
func both(prep, op string) []stepCase {
	return []stepCase{{"native", prep, op}, {"gvisor", prep, op}}
}

// stepCases are the cases of every fault point: TestKilledAtEveryStep
// fails for a point of fault.Steps that has none. A pause keeping memory
// is a freeze on native (its steps: pause.frozen, resume.thawed) and a
// checkpoint on gvisor (pause.checkpointed, resume.restored).
var stepCases = map[string][]stepCase{
	fault.CreateStarted:        both("", opCreate),
	fault.CreateInitialized:    both("", opCreate),
	fault.CreateRecorded:       both("", opCreate),
	fault.NativeCreateClaimed:  {{"native", "", opCreate}},
	fault.NativeCreateRecorded: {{"native", "", opCreate}},
	fault.NativeCreateInit:     {{"native", "", opCreate}},
	fault.KillUnrecorded:       both("", opKill),
	fault.KillStopped:          append(both("", opKill), stepCase{"native", opPauseFiles, opKill}),
	fault.PauseFrozen:          append(both("", opPauseFiles), stepCase{"native", "", opPause}),
	fault.PauseCaptured:        both("", opPauseFiles),
	fault.PauseCheckpointed:    {{"gvisor", "", opPause}},
	fault.PauseRecorded:        append(both("", opPauseFiles), stepCase{"gvisor", "", opPause}),
	fault.ResumeStarted:        both(opPauseFiles, opResume),
	fault.ResumeRestored:       {{"gvisor", opPause, opResume}},
	fault.ResumeThawed:         {{"native", opPause, opResume}},
	fault.ResumeRecorded:       append(both(opPauseFiles, opResume), stepCase{"gvisor", opPause, opResume}),
	fault.SnapshotCaptured:     both("", opSnapshot),
	fault.ForkCaptured:         both("", opFork),
	fault.ForkCreated:          both("", opFork),
	fault.BuildScratch:         {{"native", "", opBuild}},
	fault.BuildLayer:           {{"native", "", opBuild}},
	fault.BuildCommitted:       {{"native", "", opBuild}},
}

// TestKilledAtEveryStep: `hutch serve` killed with SIGKILL at each fault
// point (package fault's Steps, every one) of the operation that reaches
// it, on each backend that has it, then started again on the same data
// dir: the client saw the connection end, not a success; every sandbox
// listed is running (a command works) or paused (a resume works), the
// runtime has no sandbox the API does not list, a sandbox acknowledged
// before the kill is still there with its file, a sandbox gone left no
// state, mount, cgroup or process; a snapshot listed makes sandboxes; a
// template build killed leaves no template that does not work, and builds
// again.
func TestKilledAtEveryStep(t *testing.T) {
	for _, step := range fault.Steps {
		cases := stepCases[step]
		if len(cases) == 0 {
			t.Errorf("no case reaches fault point %s: add one to stepCases", step)
		}
		for _, c := range cases {
			name := fmt.Sprintf("%s/%s/%s", step, c.backend, c.op)
			if c.prep != "" {
				name += "-after-" + c.prep
			}
			t.Run(name, func(t *testing.T) { killedAt(t, step, c) })
		}
	}
}

// buildSpec is the build of the build cases: template name, from base,
// one RUN step. Forced: a layer cached by an earlier case would skip the
// step's points.
func buildSpec(name string) sdk.TemplateBuild {
	return sdk.TemplateBuild{Name: name, FromTemplate: "base", Force: true,
		Steps: []sdk.TemplateStep{{Type: "RUN", Args: []string{"echo built > /home/user/built"}}}}
}

// builtName is the template a build case of step builds: its own, in the
// store the package's tests share.
func builtName(step string) string {
	return "faults-" + strings.ReplaceAll(step, ".", "-")
}

func killedAt(t *testing.T, step string, c stepCase) {
	ctx := context.Background()
	e := newEnv(t, c.backend)
	e.start(step)
	var acked []string
	var sb *sdk.Sandbox
	if c.op != opCreate && c.op != opBuild {
		sb = e.sandbox(t)
		acked = append(acked, sb.ID)
		if c.prep != "" {
			if _, err := e.client.Pause(ctx, sb.ID, sdk.PauseOptions{Filesystem: c.prep == opPauseFiles}); err != nil {
				t.Fatalf("pause: %v", err)
			}
		}
	}
	var err error
	switch c.op {
	case opCreate:
		_, err = e.client.Create(ctx, sdk.CreateOptions{Timeout: 10 * time.Minute})
	case opKill:
		err = e.client.Kill(ctx, sb.ID)
		acked = nil // cut: it may be gone, or there
	case opPause, opPauseFiles:
		_, err = e.client.Pause(ctx, sb.ID, sdk.PauseOptions{Filesystem: c.op == opPauseFiles})
	case opResume:
		_, err = e.client.Connect(ctx, sb.ID, sdk.ConnectOptions{Timeout: 10 * time.Minute})
	case opSnapshot:
		_, err = e.client.CreateSnapshot(ctx, sb.ID, sdk.SnapshotOptions{Name: "faults"})
	case opFork:
		_, err = e.client.Fork(ctx, sb.ID, sdk.ForkOptions{Count: 2, Timeout: 10 * time.Minute})
	case opBuild:
		_, err = e.client.BuildTemplate(ctx, buildSpec(builtName(step)))
	}
	cut(t, c.op, err)
	e.waitDead(t, step)
	known := onDisk(e.srv.DataDir)

	e.start("")
	e.consistent(t, acked, known)
	switch c.op {
	case opSnapshot:
		snaps, _, err := e.client.ListSnapshots(ctx, sdk.ListSnapshotsOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range snaps {
			made, err := e.client.Create(ctx, sdk.CreateOptions{Template: s.ID, Timeout: time.Minute})
			if err != nil {
				t.Errorf("snapshot %s is listed, and makes no sandbox: %v", s.ID, err)
				continue
			}
			e.works(t, made.ID, true)
			e.client.DeleteSnapshot(ctx, s.ID)
		}
	case opBuild:
		e.afterBuild(t, builtName(step))
	}
}

// afterBuild checks the template a killed build left, if the API lists
// it, makes sandboxes with the build's file, and that it builds again.
func (e *env) afterBuild(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	check := func(when string) {
		sb, err := e.client.Create(ctx, sdk.CreateOptions{Template: name, Timeout: time.Minute})
		if err != nil {
			t.Errorf("%s: template %s is listed, and makes no sandbox: %v", when, name, err)
			return
		}
		defer sb.Kill(ctx)
		if b, err := sb.Files.Read(ctx, "/home/user/built", nil); err != nil || string(b) != "built\n" {
			t.Errorf("%s: /home/user/built = %q, %v", when, b, err)
		}
	}
	if ok, err := e.client.TemplateExists(ctx, name); err != nil {
		t.Fatal(err)
	} else if ok {
		check("after the kill")
	}
	if _, err := e.client.BuildTemplate(ctx, buildSpec(name)); err != nil {
		t.Fatalf("the build again: %v", err)
	}
	check("built again")
}
