package sdk_test

import (
	"slices"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/sdk"
)

// TestKeepBranchComeBack: through the Go SDK, a pause of the files only
// and a connect that boots the sandbox again; a reboot of a sandbox paused
// with its memory; a snapshot that new sandboxes start from, listed by
// sandbox and deleted; a fork of two that each have the files and change
// them on their own; and the errors of each.
func TestKeepBranchComeBack(t *testing.T) {
	e := startServer(t)
	ctx := t.Context()
	sbx := e.sandbox(t, sdk.CreateOptions{Timeout: 5 * time.Minute})
	run(t, sbx, "echo kept > "+home+"/f", nil)

	t.Run("pause the files, connect boots it again", func(t *testing.T) {
		ok, err := sbx.Pause(ctx, sdk.PauseOptions{Filesystem: true})
		if err != nil || !ok {
			t.Fatalf("Pause(Filesystem) = %v, %v", ok, err)
		}
		if again, err := sbx.Pause(ctx); err != nil || again {
			t.Errorf("a second Pause = %v, %v; want false (already paused)", again, err)
		}
		info, err := e.client.GetInfo(ctx, sbx.ID)
		if err != nil || info.State != sdk.StatePaused {
			t.Fatalf("GetInfo = %+v, %v; want paused", info, err)
		}
		back, err := e.client.Connect(ctx, sbx.ID, sdk.ConnectOptions{Timeout: 5 * time.Minute})
		must(t, err, "Connect")
		if back.EnvdAccessToken != sbx.EnvdAccessToken {
			t.Error("the resumed sandbox has another envd token")
		}
		if got := run(t, back, "cat "+home+"/f", nil).Stdout; got != "kept\n" {
			t.Errorf("after the resume: %q", got)
		}
	})

	t.Run("reboot a sandbox paused with its memory", func(t *testing.T) {
		run(t, sbx, "nohup sleep 1000 >/dev/null 2>&1 &", nil)
		if ok, err := sbx.Pause(ctx); err != nil || !ok {
			t.Fatalf("Pause = %v, %v", ok, err)
		}
		back, err := e.client.Connect(ctx, sbx.ID, sdk.ConnectOptions{Reboot: true})
		must(t, err, "Connect(Reboot)")
		if got := run(t, back, "pgrep -x sleep >/dev/null && echo yes || echo no", nil).Stdout; got != "no\n" {
			t.Errorf("a process of before the reboot runs: %q", got)
		}
		if got := run(t, back, "cat "+home+"/f", nil).Stdout; got != "kept\n" {
			t.Errorf("after the reboot: %q", got)
		}
	})

	t.Run("snapshot, create from it, list, delete", func(t *testing.T) {
		name := unique("sdk-snap")
		snap, err := sbx.CreateSnapshot(ctx, sdk.SnapshotOptions{Name: name})
		must(t, err, "CreateSnapshot")
		if snap.ID == "" || !slices.Equal(snap.Names, []string{name + ":default"}) {
			t.Errorf("CreateSnapshot = %+v", snap)
		}
		run(t, sbx, "echo changed > "+home+"/f", nil)
		from := e.sandbox(t, sdk.CreateOptions{Template: snap.ID, Timeout: time.Minute})
		if got := run(t, from, "cat "+home+"/f", nil).Stdout; got != "kept\n" {
			t.Errorf("a sandbox from the snapshot has %q", got)
		}
		page, _, err := e.client.ListSnapshots(ctx, sdk.ListSnapshotsOptions{SandboxID: sbx.ID})
		if err != nil || len(page) != 1 || page[0].ID != snap.ID {
			t.Errorf("ListSnapshots = %+v, %v", page, err)
		}
		if gone, err := e.client.DeleteSnapshot(ctx, snap.ID); err != nil || !gone {
			t.Errorf("DeleteSnapshot = %v, %v", gone, err)
		}
		if gone, err := e.client.DeleteSnapshot(ctx, snap.ID); err != nil || gone {
			t.Errorf("a second DeleteSnapshot = %v, %v; want false", gone, err)
		}
		_, err = e.client.CreateSnapshot(ctx, unknownID, sdk.SnapshotOptions{})
		is(t, err, sdk.ErrNotFound, "CreateSnapshot of an unknown sandbox")
		_, err = sbx.CreateSnapshot(ctx, sdk.SnapshotOptions{Name: "Not A Name"})
		is(t, err, sdk.ErrInvalidArgument, "CreateSnapshot with a bad name")
	})

	t.Run("fork", func(t *testing.T) {
		run(t, sbx, "echo source > "+home+"/f", nil)
		forks, err := sbx.Fork(ctx, sdk.ForkOptions{Count: 2, Timeout: time.Minute})
		must(t, err, "Fork")
		if len(forks) != 2 {
			t.Fatalf("Fork made %d", len(forks))
		}
		for _, f := range forks {
			if f.Err != nil {
				t.Fatalf("a fork failed: %v", f.Err)
			}
			killAtEnd(t, f.Sandbox)
			if got := run(t, f.Sandbox, "cat "+home+"/f", nil).Stdout; got != "source\n" {
				t.Errorf("fork %s has %q", f.Sandbox.ID, got)
			}
		}
		run(t, forks[0].Sandbox, "echo mine > "+home+"/f", nil)
		if got := run(t, forks[1].Sandbox, "cat "+home+"/f", nil).Stdout; got != "source\n" {
			t.Errorf("a change in one fork shows in another: %q", got)
		}
		if got := run(t, sbx, "cat "+home+"/f", nil).Stdout; got != "source\n" {
			t.Errorf("a change in a fork shows in the source: %q", got)
		}
		_, err = sbx.Fork(ctx, sdk.ForkOptions{Count: 101})
		is(t, err, sdk.ErrInvalidArgument, "Fork of 101")
		_, err = e.client.Fork(ctx, unknownID, sdk.ForkOptions{})
		is(t, err, sdk.ErrNotFound, "Fork of an unknown sandbox")
	})
}
