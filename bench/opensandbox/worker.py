"""One SDK's side of bench/opensandbox: OpenSandbox's Python SDK
(opensandbox, pinned in test/opensandbox/requirements.txt) or E2B's
(e2b, pinned in test/e2bpy/requirements.txt), each through its async API,
driven one operation at a time by the Go harness so that the two SDKs
can take turns.

Usage: python worker.py osb|osb-tuned|e2b (osb-tuned: OpenSandbox's SDK
with one shared connection config and its create metrics off, see
OSBTuned). The server is named as each SDK's users name it:
OPEN_SANDBOX_DOMAIN and OPEN_SANDBOX_API_KEY for OpenSandbox's,
E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY for E2B's.

The harness writes one JSON request a line on stdin and reads one JSON
answer a line on stdout:

  {"op": "hello"}                  -> {"sdk": "opensandbox 1.1.1", "python": "3.11.2"}
  {"op": "create"}                 -> {"total": ms, "create": ms, "run": ms, "cpu": ms}
      Sandbox.create("base") then commands.run("true"), timed; the
      sandbox is killed (and its client closed) after the clock stops.
  {"op": "connect", "id": ID}      -> {}
      the sandbox the steady operations use, connected to once.
  {"op": "cmd"}                    -> {"total": ms, "cpu": ms}
      commands.run("true") in that sandbox.
  {"op": "write", "size": N, "path": P} -> {"total": ms, "cpu": ms}
      N bytes of text written to P.
  {"op": "read", "size": N, "path": P}  -> {"total": ms, "cpu": ms}
      P read back as text, compared with what write wrote after the
      clock stops.

A failed operation answers {"error": "..."}. Times are time.perf_counter
around the SDK's awaited calls only: no pipe, JSON or process start-up is
inside them; cpu is this process's CPU time (time.process_time) over the
same span, the SDK's and Python's own share of the time. Reading stdin
happens in a thread, so tasks an SDK leaves running after a call
(OpenSandbox's create metrics report) finish while the worker waits, not
inside the next timed call.
"""

import asyncio
import json
import platform
import sys
import time
from importlib.metadata import version


class Clock:
    """Wall and CPU time over the timed calls of one operation."""

    def __init__(self):
        self.t0, self.c0 = time.perf_counter(), time.process_time()

    def lap(self):
        """ms of wall time since the start."""
        return (time.perf_counter() - self.t0) * 1000.0

    def done(self, **fields):
        """The operation's answer: total and cpu, with fields."""
        c1, t1 = time.process_time(), time.perf_counter()
        return {"total": (t1 - self.t0) * 1000.0, "cpu": (c1 - self.c0) * 1000.0, **fields}


def payload(size):
    """size bytes of ASCII text: both SDKs read a file back as text."""
    line = "".join(chr(ord("a") + i % 26) for i in range(63)) + "\n"
    return (line * (size // len(line) + 1))[:size]


def check_read(got, size):
    if got != payload(size):
        raise RuntimeError(f"read back {len(got)} characters that differ from the {size} written")


class OSB:
    """OpenSandbox's Python SDK, its async API as its README uses it."""

    name = "opensandbox"

    def __init__(self):
        from opensandbox import Sandbox
        from opensandbox.models.filesystem import WriteEntry

        self.Sandbox, self.WriteEntry = Sandbox, WriteEntry
        self.sbx = None

    @staticmethod
    def check(ex):
        if ex.exit_code not in (0, None) or ex.error is not None:
            raise RuntimeError(f"true: exit code {ex.exit_code}, error {ex.error}")

    async def create(self):
        clock = Clock()
        sbx = await self.Sandbox.create("base")
        try:
            created = clock.lap()
            ex = await sbx.commands.run("true")
            out = clock.done(create=created)
            out["run"] = out["total"] - created
            self.check(ex)
        finally:
            try:
                await sbx.kill()
            finally:
                await sbx.close()
        return out

    async def connect(self, sandbox_id):
        self.sbx = await self.Sandbox.connect(sandbox_id)

    async def cmd(self):
        clock = Clock()
        ex = await self.sbx.commands.run("true")
        out = clock.done()
        self.check(ex)
        return out

    async def write(self, size, path):
        data = payload(size)
        clock = Clock()
        await self.sbx.files.write_files([self.WriteEntry(path=path, data=data)])
        return clock.done()

    async def read(self, size, path):
        clock = Clock()
        got = await self.sbx.files.read_file(path)
        out = clock.done()
        check_read(got, size)
        return out

class OSBTuned(OSB):
    """OpenSandbox's Python SDK with the two settings its create's own
    cost depends on: one ConnectionConfig for every sandbox, with a
    transport of its own (otherwise every create builds a transport, and
    with it an SSL context that loads the CA bundle, even for http), and
    disable_metrics (otherwise every create reports its duration to
    POST /metrics/events through a new httpx client: another SSL context,
    built while the first command runs)."""

    def __init__(self):
        super().__init__()
        import httpx
        from opensandbox.config import ConnectionConfig

        self.config = ConnectionConfig(transport=httpx.AsyncHTTPTransport(), disable_metrics=True)

    async def create(self):
        clock = Clock()
        sbx = await self.Sandbox.create("base", connection_config=self.config)
        try:
            created = clock.lap()
            ex = await sbx.commands.run("true")
            out = clock.done(create=created)
            out["run"] = out["total"] - created
            self.check(ex)
        finally:
            try:
                await sbx.kill()
            finally:
                await sbx.close()  # the shared transport stays open
        return out


class E2B:
    """E2B's Python SDK, its async API (AsyncSandbox)."""

    name = "e2b"

    def __init__(self):
        from e2b import AsyncSandbox

        self.Sandbox = AsyncSandbox
        self.sbx = None

    async def create(self):
        clock = Clock()
        sbx = await self.Sandbox.create("base")
        try:
            created = clock.lap()
            await sbx.commands.run("true")  # raises on a non-zero exit
            out = clock.done(create=created)
            out["run"] = out["total"] - created
        finally:
            await sbx.kill()
        return out

    async def connect(self, sandbox_id):
        self.sbx = await self.Sandbox.connect(sandbox_id)

    async def cmd(self):
        clock = Clock()
        await self.sbx.commands.run("true")  # raises on a non-zero exit
        return clock.done()

    async def write(self, size, path):
        data = payload(size)
        clock = Clock()
        await self.sbx.files.write(path, data)
        return clock.done()

    async def read(self, size, path):
        clock = Clock()
        got = await self.sbx.files.read(path)
        out = clock.done()
        check_read(got, size)
        return out

async def serve(sdk):
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        req = json.loads(line)
        op = req["op"]
        try:
            if op == "hello":
                out = {"sdk": f"{sdk.name} {version(sdk.name)}", "python": platform.python_version()}
            elif op == "create":
                out = await sdk.create()
            elif op == "connect":
                await sdk.connect(req["id"])
                out = {}
            elif op == "cmd":
                out = await sdk.cmd()
            elif op == "write":
                out = await sdk.write(req["size"], req["path"])
            elif op == "read":
                out = await sdk.read(req["size"], req["path"])
            else:
                out = {"error": f"unknown op {op!r}"}
        except Exception as e:  # reported to the harness, which counts it
            out = {"error": f"{type(e).__name__}: {e}".splitlines()[0][:300]}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


def main():
    sdks = {"osb": OSB, "osb-tuned": OSBTuned, "e2b": E2B}
    if len(sys.argv) != 2 or sys.argv[1] not in sdks:
        sys.exit("usage: worker.py osb|osb-tuned|e2b")
    sdk = sdks[sys.argv[1]]()
    asyncio.run(serve(sdk))


if __name__ == "__main__":
    main()
