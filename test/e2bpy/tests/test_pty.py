"""sandbox.pty with the sync API: interactive terminals."""

import threading
import time

import pytest
from e2b import CommandExitException, PtySize

from conftest import wait_for


class Terminal:
    """Collects a PTY's output, read on a thread as it comes."""

    def __init__(self, handle):
        self.handle = handle
        self.chunks = []
        self.result = None
        self.error = None
        self.thread = threading.Thread(target=self._wait, daemon=True)
        self.thread.start()

    def _wait(self):
        try:
            self.result = self.handle.wait(on_pty=lambda d: self.chunks.append(bytes(d)))
        except Exception as e:  # noqa: BLE001 - the test judges it
            self.error = e

    @property
    def out(self):
        return b"".join(self.chunks).decode(errors="replace")

    def until(self, text):
        wait_for(lambda: text in self.out, 10, lambda: f"{text!r} in {self.out!r}")

    def done(self):
        self.thread.join(10)
        assert not self.thread.is_alive(), "the terminal did not end"


def test_pty_create_input_resize_kill(sbx):
    h = sbx.pty.create(PtySize(rows=24, cols=80))
    t = Terminal(h)
    try:
        assert isinstance(h.pid, int) and h.pid > 0
        assert any(p.pid == h.pid for p in sbx.commands.list()), "the pty is not in commands.list()"
        # $((…)) makes markers appear only in the output, not in the echo.
        sbx.pty.send_stdin(h.pid, b'stty size; echo "A$((40+2))"; echo "T=$TERM"; id -un; echo "Z$((1+2))"\n')
        t.until("Z3")
        assert "24 80\r\n" in t.out
        assert "T=xterm-256color" in t.out
        assert "\r\nuser\r\n" in t.out

        sbx.pty.resize(h.pid, PtySize(rows=30, cols=100))
        sbx.pty.send_stdin(h.pid, b'stty size; echo "B$((40+3))"\n')
        t.until("B43")
        assert "30 100\r\n" in t.out

        assert sbx.pty.kill(h.pid) is True
        t.done()
        assert isinstance(t.error, CommandExitException), f"wait after kill: {t.error!r}"
        assert sbx.pty.kill(999999) is False
    finally:
        sbx.pty.kill(h.pid)


def test_pty_exit_code_user_cwd(sbx):
    h = sbx.pty.create(PtySize(rows=40, cols=120), user="root", cwd="/tmp", envs={"PTYVAR": "v1"})
    t = Terminal(h)
    sbx.pty.send_stdin(h.pid, b'echo "W=$(pwd) U=$(id -u) E=$PTYVAR"; exit 0\n')
    t.done()
    assert t.error is None, t.error
    assert t.result.exit_code == 0
    assert "W=/tmp U=0 E=v1" in t.out


def test_pty_ctrl_c_interrupts(sbx):
    h = sbx.pty.create(PtySize(rows=24, cols=80))
    t = Terminal(h)
    try:
        sbx.pty.send_stdin(h.pid, b'sleep 30; echo "S$((1+1))"\n')
        t.until("sleep 30")  # the echo of the input: the shell read it
        time.sleep(0.5)
        sbx.pty.send_stdin(h.pid, b"\x03")
        sbx.pty.send_stdin(h.pid, b'echo "C$((2+2))"\n')
        t.until("C4")
        assert "S2" not in t.out, "sleep was not interrupted"
    finally:
        sbx.pty.kill(h.pid)
