"""Pause and resume (connect resumes) and snapshots with the sync API."""

import time

import pytest
from e2b import Sandbox, SandboxNotFoundException, SandboxQuery, SandboxState

from conftest import RUNTIME, unique, wait_for, with_runtime

UNKNOWN = "inosuchsandbox00000000"

COUNTER = "i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done"


def start_counter(sbx):
    """Starts a process that counts in its memory, writing each number to
    /tmp/count: it goes on across a pause that keeps memory, and is gone
    after one that keeps files only."""
    sbx.commands.run(COUNTER, background=True, timeout=0)
    wait_for(lambda: sbx.files.exists("/tmp/count"), 5, "the counter")


def count(sbx):
    """The counter's number (read again when the shell was caught between
    truncating /tmp/count and writing it)."""
    for _ in range(20):
        out = sbx.commands.run("cat /tmp/count").stdout.strip()
        if out.isdigit():
            return int(out)
        time.sleep(0.01)
    pytest.fail("/tmp/count never held a number")


def counting(sbx):
    """Whether the counter still counts."""
    before = count(sbx)
    time.sleep(0.4)
    return count(sbx) != before


def test_pause_keeps_memory_and_files_connect_resumes():
    tag = unique("pause")
    sbx = Sandbox.create(metadata={"suite": tag}, envs={"KEPT": "yes"}, timeout=120)
    try:
        sbx.files.write("/home/user/note.txt", "written before the pause")
        start_counter(sbx)
        start = time.monotonic()
        before = count(sbx)

        assert sbx.pause() is True
        paused_at = time.monotonic()
        assert sbx.pause() is False, "a second pause reports already paused"
        assert sbx.get_info().state == SandboxState.PAUSED
        assert sbx.is_running() is False
        paused = Sandbox.list(query=SandboxQuery(metadata={"suite": tag}, state=[SandboxState.PAUSED])).next_items()
        assert [(s.sandbox_id, s.state) for s in paused] == [(sbx.sandbox_id, SandboxState.PAUSED)]
        assert Sandbox.list(query=SandboxQuery(metadata={"suite": tag}, state=[SandboxState.RUNNING])).next_items() == []

        time.sleep(1.5)  # 15 counts, were it running
        resuming_at = time.monotonic()
        resumed = Sandbox.connect(sbx.sandbox_id, timeout=60)
        assert resumed.sandbox_id == sbx.sandbox_id
        assert resumed.get_info().state == SandboxState.RUNNING
        after = count(resumed)
        # Memory kept: the same counter, on from where it was. Frozen while
        # paused: it adds at most one per 0.1 s it runs (and one for a sleep
        # that ended while it was frozen), and it ran at most the time
        # outside the pause, however slow the machine.
        ran = time.monotonic() - start - (resuming_at - paused_at)
        assert before <= after <= before + 10 * ran + 2, (
            f"count {before} -> {after} across a pause of {resuming_at - paused_at:.1f} s, {ran:.1f} s outside it")
        assert counting(resumed), "the counter goes on after the resume"
        assert resumed.files.read("/home/user/note.txt") == "written before the pause"
        assert resumed.commands.run("echo $KEPT").stdout == "yes\n"
        assert resumed.get_info().metadata == with_runtime({"suite": tag})
    finally:
        Sandbox.kill(sbx.sandbox_id)


@pytest.mark.parametrize(
    "pause, resume",
    [({"mode": "filesystem"}, {}), ({}, {"on_resume": "reboot"})],
    ids=["pause mode filesystem", "connect on_resume reboot"],
)
def test_files_kept_processes_not(pause, resume):
    """A pause without memory, or a resume that reboots a sandbox paused
    with it, keeps the files and no process."""
    sbx = Sandbox.create(timeout=120)
    try:
        sbx.files.write("/home/user/note.txt", "kept")
        start_counter(sbx)
        assert sbx.pause(**pause) is True
        assert sbx.get_info().state == SandboxState.PAUSED
        back = Sandbox.connect(sbx.sandbox_id, **resume)
        assert back.sandbox_id == sbx.sandbox_id
        assert back.files.read("/home/user/note.txt") == "kept"
        assert counting(back) is False, "no process survives"
    finally:
        Sandbox.kill(sbx.sandbox_id)


def test_timeout_pauses_and_auto_resume():
    sbx = Sandbox.create(timeout=2, lifecycle={"on_timeout": "pause", "auto_resume": True})
    try:
        info = sbx.get_info()
        assert info.lifecycle == {"on_timeout": "pause", "auto_resume": True}
        sbx.files.write("/home/user/kept.txt", "kept across the pause")
        wait_for(lambda: Sandbox.get_info(sbx.sandbox_id).state == SandboxState.PAUSED, 20, "paused at its timeout")
        # Traffic to envd wakes it.
        assert sbx.files.read("/home/user/kept.txt") == "kept across the pause"
        assert sbx.get_info().state == SandboxState.RUNNING
    finally:
        Sandbox.kill(sbx.sandbox_id)


def test_unknown_sandbox_pause_and_connect():
    for call in (Sandbox.pause, Sandbox.connect, Sandbox.create_snapshot):
        with pytest.raises(SandboxNotFoundException):
            call(UNKNOWN)


def test_snapshot_create_from_list_delete():
    sbx = Sandbox.create(timeout=120)
    name = unique("snap")
    try:
        sbx.files.write("/home/user/state.txt", "at the snapshot")
        start_counter(sbx)
        snap = sbx.create_snapshot(name)
        assert snap.snapshot_id
        assert snap.names == [f"{name}:default"]
        assert sbx.get_info().state == SandboxState.RUNNING, "the source runs on"
        assert counting(sbx), "the source goes on counting"
        sbx.files.write("/home/user/state.txt", "after the snapshot")

        listed = []
        p = sbx.list_snapshots()
        while p.has_next:
            listed += p.next_items()
        assert [s.snapshot_id for s in listed] == [snap.snapshot_id]
        assert [s.snapshot_id for s in Sandbox.list_snapshots(name=name).next_items()] == [snap.snapshot_id]

        for ref in (snap.snapshot_id, name):
            copy = Sandbox.create(ref, timeout=60)
            try:
                assert copy.files.read("/home/user/state.txt") == "at the snapshot", f"created from {ref}"
                assert counting(copy) is (RUNTIME == "gvisor"), "a native snapshot keeps files, not processes"
            finally:
                copy.kill()

        assert Sandbox.delete_snapshot(snap.snapshot_id) is True
        assert Sandbox.delete_snapshot(snap.snapshot_id) is False
        assert Sandbox.list_snapshots(sandbox_id=sbx.sandbox_id).next_items() == []
        with pytest.raises(Exception):
            Sandbox.create(name)
    finally:
        sbx.kill()


def test_snapshots_page_by_sandbox():
    sbx = Sandbox.create(timeout=120)
    try:
        ids = [sbx.create_snapshot().snapshot_id for _ in range(3)]
        p = Sandbox.list_snapshots(sandbox_id=sbx.sandbox_id, limit=2)
        first = p.next_items()
        assert len(first) == 2
        assert p.has_next
        rest = p.next_items()
        assert sorted(s.snapshot_id for s in first + rest) == sorted(ids)
        for i in ids:
            assert Sandbox.delete_snapshot(i) is True
    finally:
        sbx.kill()
