"""sandbox.commands with the sync API: foreground and background commands,
envs, cwd, user, stdin, callbacks, connect, kill, list and timeouts."""

import time

import pytest
from e2b import CommandExitException, SandboxException, TimeoutException

from conftest import unique, wait_for


def test_run_stdout_stderr_exit_code(sbx):
    r = sbx.commands.run("echo hello; echo oops >&2")
    assert (r.exit_code, r.stdout, r.stderr, r.error) == (0, "hello\n", "oops\n", None)


def test_nonzero_exit_raises_command_exit_exception(sbx):
    with pytest.raises(CommandExitException) as e:
        sbx.commands.run("echo partial; echo bad >&2; exit 3")
    assert (e.value.exit_code, e.value.stdout, e.value.stderr) == (3, "partial\n", "bad\n")


def test_default_user_home_and_cwd(sbx):
    assert sbx.commands.run('id -un; id -u; echo "$HOME"; pwd').stdout == "user\n1000\n/home/user\n/home/user\n"


def test_envs_cwd_user(sbx):
    assert sbx.commands.run('echo "$FOO/$BAR"', envs={"FOO": "foo value", "BAR": "b=r"}).stdout == "foo value/b=r\n"
    assert sbx.commands.run("pwd", cwd="/tmp").stdout == "/tmp\n"
    assert sbx.commands.run('id -u; echo "$HOME"; pwd', user="root").stdout == "0\n/root\n/root\n"


def test_timeout_raises_timeout_exception_and_kills(sbx):
    marker = unique("timeout")
    with pytest.raises(TimeoutException):
        sbx.commands.run(f"sleep 10; : {marker}", timeout=1.5)
    wait_for(
        lambda: not any(marker in " ".join(p.args) for p in sbx.commands.list()),
        5,
        "the timed-out process to leave commands.list()",
    )


def test_on_stdout_on_stderr_stream(sbx):
    out, err = [], []
    r = sbx.commands.run(
        "for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.1; done",
        on_stdout=out.append,
        on_stderr=err.append,
    )
    assert r.stdout == "out1\nout2\nout3\n"
    assert r.stderr == "err1\nerr2\nerr3\n"
    assert "".join(out) == r.stdout
    assert "".join(err) == r.stderr
    assert len(out) >= 2, f"expected streamed chunks, got {out!r}"


def test_large_output_arrives_whole(sbx):
    r = sbx.commands.run("head -c 300000 /dev/zero | tr '\\0' x")
    assert r.stdout == "x" * 300000


def test_background_list_wait(sbx):
    marker = unique("bg")
    h = sbx.commands.run(f"sleep 0.5; echo done; : {marker}", background=True)
    assert isinstance(h.pid, int) and h.pid > 0
    procs = {p.pid: p for p in sbx.commands.list()}
    assert h.pid in procs, f"pid {h.pid} not in commands.list()"
    assert procs[h.pid].cmd == "/bin/bash"
    assert marker in " ".join(procs[h.pid].args)
    r = h.wait()
    assert (r.exit_code, r.stdout) == (0, "done\n")
    wait_for(lambda: all(p.pid != h.pid for p in sbx.commands.list()), 5, "the finished process to leave the list")


def test_kill_by_pid_and_by_handle(sbx):
    h = sbx.commands.run("sleep 30", background=True)
    assert sbx.commands.kill(h.pid) is True
    with pytest.raises(CommandExitException) as e:
        h.wait()
    assert e.value.exit_code != 0
    assert sbx.commands.kill(h.pid) is False, "nothing is left to kill once it has ended"
    assert sbx.commands.kill(999999) is False

    h = sbx.commands.run("sleep 30", background=True)
    assert h.kill() is True
    with pytest.raises(CommandExitException):
        h.wait()


def test_disconnect_then_connect(sbx):
    first = []
    h = sbx.commands.run("for i in 1 2 3 4 5 6; do echo tick$i; sleep 0.3; done", background=True, on_stdout=first.append)
    # The sync handle reads its stream as it is iterated: read to tick1.
    for out, _, _ in h:
        if out and "tick1" in out:
            break
    h.disconnect()
    time.sleep(0.2)
    assert any(p.pid == h.pid for p in sbx.commands.list()), "disconnecting killed the command"

    second = []
    h2 = sbx.commands.connect(h.pid)
    assert h2.pid == h.pid
    r = h2.wait(on_stdout=second.append)
    assert r.exit_code == 0
    assert "tick6" in "".join(second), f"after connect got {second!r}"
    assert "tick6" not in "".join(first)


def test_connect_to_unknown_pid_fails(sbx):
    with pytest.raises(SandboxException):
        sbx.commands.connect(999999)


def test_stdin_send_and_close(sbx):
    h = sbx.commands.run("cat", background=True, stdin=True)
    sbx.commands.send_stdin(h.pid, "hello\n")
    h.send_stdin(b"world\n")
    sbx.commands.close_stdin(h.pid)
    r = h.wait()
    assert (r.exit_code, r.stdout) == (0, "hello\nworld\n")


def test_stdin_lines_reach_a_reading_command(sbx):
    h = sbx.commands.run('read a; echo "got $a"; read b; echo "got $b"', background=True, stdin=True)
    sbx.commands.send_stdin(h.pid, "one\n")
    sbx.commands.send_stdin(h.pid, "two\n")
    assert h.wait().stdout == "got one\ngot two\n"


def test_many_commands_in_a_row(sbx):
    for i in range(100):
        assert sbx.commands.run(f"echo {i}").stdout == f"{i}\n"
