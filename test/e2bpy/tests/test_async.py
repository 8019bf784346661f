"""The async API (AsyncSandbox) over the same ground: lifecycle, commands,
PTY, files, watches, pause/resume, snapshots and the SDK's exceptions."""

import asyncio

import pytest
from e2b import (
    AsyncSandbox,
    AuthenticationException,
    CommandExitException,
    FileNotFoundException,
    FilesystemEventType,
    NotFoundException,
    PtySize,
    SandboxNotFoundException,
    SandboxQuery,
    SandboxState,
    TimeoutException,
)

from conftest import HOME, await_for, unique, with_runtime

pytestmark = pytest.mark.asyncio

UNKNOWN = "inosuchsandbox0000000"


async def test_async_lifecycle():
    tag = unique("async")
    sbx = await AsyncSandbox.create("base", timeout=120, metadata={"suite": tag}, envs={"GREETING": "hi"}, secure=True)
    try:
        assert (await sbx.commands.run('echo "$GREETING"')).stdout == "hi\n"
        info = await sbx.get_info()
        assert (info.sandbox_id, info.template_id, info.state) == (sbx.sandbox_id, "base", SandboxState.RUNNING)
        assert info.metadata == with_runtime({"suite": tag})
        page = await AsyncSandbox.list(query=SandboxQuery(metadata={"suite": tag})).next_items()
        assert [s.sandbox_id for s in page] == [sbx.sandbox_id]
        await sbx.set_timeout(60)
        assert (await sbx.get_info()).end_at < info.end_at
        again = await AsyncSandbox.connect(sbx.sandbox_id)
        assert (await again.commands.run("echo connected")).stdout == "connected\n"
        assert await sbx.is_running() is True
        metrics = await await_for(sbx.get_metrics, 10, "a first sample")
        assert metrics[0].mem_total == 512 * 1024 * 1024
    finally:
        assert await sbx.kill() is True
    assert await sbx.is_running() is False
    assert await AsyncSandbox.kill(sbx.sandbox_id) is False
    with pytest.raises(SandboxNotFoundException):
        await sbx.get_info()


async def test_async_errors():
    with pytest.raises(SandboxNotFoundException):
        await AsyncSandbox.connect(UNKNOWN)
    with pytest.raises(AuthenticationException):
        await AsyncSandbox.create(api_key="e2b_" + "0" * 40)


async def test_async_commands():
    sbx = await AsyncSandbox.create(timeout=120)
    try:
        r = await sbx.commands.run("echo hello; echo oops >&2", cwd="/tmp", user="root", envs={"A": "b"})
        assert (r.exit_code, r.stdout, r.stderr) == (0, "hello\n", "oops\n")
        assert (await sbx.commands.run('pwd; id -u; echo "$A"', cwd="/tmp", user="root", envs={"A": "b"})).stdout == "/tmp\n0\nb\n"
        with pytest.raises(CommandExitException) as e:
            await sbx.commands.run("exit 3")
        assert e.value.exit_code == 3
        with pytest.raises(TimeoutException):
            await sbx.commands.run("sleep 10", timeout=1.5)

        out = []
        h = await sbx.commands.run("for i in 1 2 3; do echo tick$i; sleep 0.1; done", background=True, on_stdout=out.append)
        assert any(p.pid == h.pid for p in await sbx.commands.list())
        r = await h.wait()
        assert r.stdout == "tick1\ntick2\ntick3\n"
        assert "".join(out) == r.stdout

        h = await sbx.commands.run("cat", background=True, stdin=True)
        await sbx.commands.send_stdin(h.pid, "hello\n")
        await sbx.commands.close_stdin(h.pid)
        assert (await h.wait()).stdout == "hello\n"

        h = await sbx.commands.run("sleep 30", background=True)
        assert await sbx.commands.kill(h.pid) is True
        with pytest.raises(CommandExitException):
            await h.wait()

        seen = []
        h = await sbx.commands.run("for i in 1 2 3 4 5; do echo t$i; sleep 0.3; done", background=True)
        await h.disconnect()
        h2 = await sbx.commands.connect(h.pid, on_stdout=seen.append)
        assert (await h2.wait()).exit_code == 0
        assert "t5" in "".join(seen)
    finally:
        await sbx.kill()


async def test_async_pty():
    sbx = await AsyncSandbox.create(timeout=120)
    try:
        chunks = []
        h = await sbx.pty.create(PtySize(rows=24, cols=80), on_data=lambda d: chunks.append(bytes(d)))
        out = lambda: b"".join(chunks).decode(errors="replace")  # noqa: E731
        await sbx.pty.send_stdin(h.pid, b'stty size; echo "A$((40+2))"\n')
        await await_for(lambda: asyncio.sleep(0, "A42" in out()), 10, lambda: f"A42 in {out()!r}")
        assert "24 80\r\n" in out()
        await sbx.pty.resize(h.pid, PtySize(rows=30, cols=100))
        await sbx.pty.send_stdin(h.pid, b'stty size; echo "B$((40+3))"; exit 0\n')
        r = await h.wait()
        assert r.exit_code == 0
        assert "30 100\r\n" in out()
    finally:
        await sbx.kill()


async def test_async_files_and_watch():
    sbx = await AsyncSandbox.create(timeout=120)
    try:
        d = f"{HOME}/{unique('afiles')}"
        assert await sbx.files.make_dir(d) is True
        events = []
        w = await sbx.files.watch_dir(d, events.append, recursive=True)
        try:
            info = await sbx.files.write(f"{d}/a.txt", "async text")
            assert info.path == f"{d}/a.txt"
            assert await sbx.files.read(f"{d}/a.txt") == "async text"
            assert bytes(await sbx.files.read(f"{d}/a.txt", format="bytes")) == b"async text"
            streamed = b"".join([c async for c in await sbx.files.read(f"{d}/a.txt", format="stream")])
            assert streamed == b"async text"
            await sbx.files.write_files([{"path": f"{d}/sub/b.txt", "data": b"B"}])
            assert sorted(e.path for e in await sbx.files.list(d, depth=2)) == [f"{d}/a.txt", f"{d}/sub", f"{d}/sub/b.txt"]
            assert await sbx.files.exists(f"{d}/sub/b.txt") is True
            assert (await sbx.files.get_info(f"{d}/sub/b.txt")).size == 1
            await sbx.files.rename(f"{d}/a.txt", f"{d}/c.txt")
            await sbx.files.remove(f"{d}/sub")
            assert await sbx.files.exists(f"{d}/sub") is False

            def saw(type_, name):
                async def poll():
                    return any(e.type == type_ and e.name == name for e in events)

                return poll

            await await_for(saw(FilesystemEventType.CREATE, "a.txt"), 10, "create a.txt")
            await await_for(saw(FilesystemEventType.CREATE, "sub/b.txt"), 10, lambda: f"create sub/b.txt in {events}")
            await await_for(saw(FilesystemEventType.RENAME, "a.txt"), 10, "rename a.txt")
            await await_for(saw(FilesystemEventType.REMOVE, "sub"), 10, "remove sub")
        finally:
            await w.stop()
        with pytest.raises(FileNotFoundException):
            await sbx.files.read(f"{d}/nope")
        with pytest.raises(NotFoundException):
            await sbx.files.get_info(f"{d}/nope")
    finally:
        await sbx.kill()


async def test_async_pause_connect_snapshot():
    sbx = await AsyncSandbox.create(timeout=120)
    try:
        await sbx.files.write("/home/user/note.txt", "before the pause")
        assert await sbx.pause() is True
        assert (await sbx.get_info()).state == SandboxState.PAUSED
        back = await AsyncSandbox.connect(sbx.sandbox_id)
        assert await back.files.read("/home/user/note.txt") == "before the pause"

        snap = await back.create_snapshot()
        listed = await AsyncSandbox.list_snapshots(sandbox_id=sbx.sandbox_id).next_items()
        assert [s.snapshot_id for s in listed] == [snap.snapshot_id]
        copy = await AsyncSandbox.create(snap.snapshot_id, timeout=60)
        try:
            assert await copy.files.read("/home/user/note.txt") == "before the pause"
        finally:
            await copy.kill()
        assert await AsyncSandbox.delete_snapshot(snap.snapshot_id) is True
    finally:
        await AsyncSandbox.kill(sbx.sandbox_id)
