"""Hutch's code interpreter server: E2B's code interpreter protocol on port
49999, in front of Jupyter kernels it runs itself (jupyter_client; no
Jupyter server in between).

    POST   /execute               {code, context_id?, language?, env_vars?}
                                  -> newline-delimited JSON, as produced
    POST   /contexts              {language?, cwd?} -> {id, language, cwd}
    GET    /contexts              -> [{id, language, cwd}, ...]
    DELETE /contexts/{id}
    POST   /contexts/{id}/restart
    GET    /health

Each context is one kernel. The default context of a language is made on
its first use (Python's at start: /health answers once it runs), and one
context runs one execution at a time, in order of arrival, as a notebook
does. A client that goes away (the SDKs' timeout aborts the request)
interrupts its cell; the context keeps its state. A kernel that died is
started again for the next execution, which says so on stderr.

This file is part of Hutch (internal/template/recipes/code-interpreter-v1);
the template's recipe installs it with its pinned requirements.
"""

import asyncio
import hashlib
import hmac
import json
import logging
import os
import signal
import socket
import stat
import sys
import tempfile
import time
import uuid

import aiohttp
from aiohttp import web
from jupyter_client.manager import AsyncKernelManager

PORT = int(os.environ.get("HUTCH_CODE_INTERPRETER_PORT", "49999"))
DEFAULT_CWD = "/home/user"

# Languages the SDKs name, and the kernel that runs each. R and Java have
# no kernel in this template.
KERNELS = {
    "python": "python3",
    "javascript": "deno",
    "typescript": "deno",
    "bash": "bash",
}
ALIASES = {"js": "javascript", "ts": "typescript", "sh": "bash", "py": "python", "python3": "python"}

# Output an execution may stream: text of stdout and stderr together, and
# results (images are base64). Past either, the rest is dropped and one
# note says how much.
MAX_TEXT = 4 << 20
# Bodies: /execute's, read only once its token passed, and every other
# call's (the SDKs send those without the token: whoever reaches the port).
MAX_EXECUTE_BODY = 16 << 20
MAX_BODY = 64 << 10
# How long after a Deno cell's idle status (and after each message that
# comes later) its output may still come.
LATE_RESULT = 0.05
MAX_RESULTS = 64 << 20

# Jupyter's MIME types, as the SDKs name them in a result; others go
# under "extra".
MIME = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
    "e2b/data": "data",
    "e2b/chart": "chart",
}

log = logging.getLogger("code-interpreter")

# envd answers GET /auth with 204 when X-Access-Token is the sandbox's
# access token, or the sandbox has none, and 401 otherwise.
ENVD_AUTH = "http://127.0.0.1:49983/auth"
# How long a token envd accepted is taken without asking again.
AUTH_TTL = 5.0


class Auth:
    """Checks X-Access-Token against the sandbox's envd access token.

    The SDKs send the token with /execute only (not with the /contexts
    calls), so /execute needs it when the sandbox has one; the others check
    it when it is sent. Without a token, anyone who reaches the port
    (every port is public unless the sandbox restricts its traffic) could
    run code as the sandbox's user."""

    def __init__(self):
        self.session = None
        self.digest = None
        self.when = 0.0

    async def status(self, token):
        digest = hashlib.sha256((token or "").encode("utf-8", "replace")).digest()
        if self.digest is not None and hmac.compare_digest(digest, self.digest) and time.monotonic() - self.when < AUTH_TTL:
            return 204
        if self.session is None:
            self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
        headers = {"X-Access-Token": token} if token else {}
        try:
            async with self.session.get(ENVD_AUTH, headers=headers) as r:
                status = r.status
        except Exception as e:
            log.warning("envd /auth: %s", e)
            return 503
        if status == 204:
            self.digest, self.when = digest, time.monotonic()
            return 204
        return 401 if status == 401 else 503


class RequestError(Exception):
    """An error of the request itself: its HTTP status and text."""

    def __init__(self, status, text):
        super().__init__(text)
        self.status = status
        self.text = text


# The kernels' connection files and sockets: a directory only the server's
# user may enter, made afresh (an existing one could be someone else's).
RUNTIME = tempfile.mkdtemp(prefix="hutch-code-interpreter-")


def open_dir(path):
    """Opens the directory path names, from / down, each component
    without following a symbolic link (path is made canonical first), and
    returns its canonical path, the open descriptor, and whether only the
    server's user (or root) can put files in it or replace it: it and each
    directory above it are theirs, and none is writable by others (but
    sticky ones above it, as /tmp, whose entries only their owners may
    rename). A component that changed into a link meanwhile is an error."""
    real = os.path.realpath(path)
    me = os.getuid()
    safe = True
    names = [n for n in real.split("/") if n]
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i in range(len(names) + 1):
            if i > 0:
                nfd = os.open(names[i - 1], os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                os.close(fd)
                fd = nfd
            st = os.fstat(fd)
            last = i == len(names)
            if st.st_uid not in (me, 0):
                safe = False
            if st.st_mode & 0o022 and (last or not st.st_mode & stat.S_ISVTX):
                safe = False
    except OSError as e:
        os.close(fd)
        raise RequestError(400, f"cwd {path!r}: {e.strerror}")
    return real, fd, safe


def max_contexts():
    """Contexts a sandbox may have: HUTCH_CODE_INTERPRETER_CONTEXTS, else 8.
    The sandbox's memory limit is not visible inside it; a kernel holds
    ~60 MiB (Python) to ~200 MiB (Deno), and past the limit the OOM killer
    takes kernels (oom_score_adj 1000), not the server."""
    v = os.environ.get("HUTCH_CODE_INTERPRETER_CONTEXTS", "")
    if v.isdigit() and int(v) > 0:
        return int(v)
    return 8


def language_of(name):
    lang = (name or "python").strip().lower()
    lang = ALIASES.get(lang, lang)
    if lang not in KERNELS:
        known = ", ".join(sorted(KERNELS))
        if lang in ("r", "java"):
            raise RequestError(400, f"language {lang!r} is not installed in this template (it runs: {known})")
        raise RequestError(400, f"unknown language {name!r} (this template runs: {known})")
    return lang


def now_us():
    return time.time_ns() // 1000


class Context:
    """One kernel and what runs in it, one execution at a time."""

    def __init__(self, id, language, cwd):
        self.id = id
        self.language = language
        self.cwd = cwd
        self.km = None
        self.kc = None
        self.lock = asyncio.Lock()
        self.restarted = None  # why the kernel was started again, to say once
        self.current = None  # msg_id of the last execution
        self.restore = None  # code putting back what env_vars changed
        self.moved = False  # started elsewhere than cwd (Deno, cwd not safe)
        self.safe = True  # real is only its user's (open_dir)
        self.real = cwd  # the directory the kernel was started in
        self.dirfd = None  # that directory, open

    def json(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    async def start(self):
        """Starts the context's kernel (again, after a restart): in the
        directory its path resolves to now, checked now."""
        # Opened once, component by component without following links,
        # judged on what was opened, and the kernel started in exactly that
        # directory (through its descriptor): a link someone else swaps
        # between the check and the start (or before a restart) must not
        # move the kernel to a directory they wrote.
        real, dirfd, safe = open_dir(self.cwd)
        if self.dirfd is not None:
            os.close(self.dirfd)
        self.dirfd = dirfd
        kernel = KERNELS[self.language]
        self.km = AsyncKernelManager(kernel_name=kernel)
        # Python's and bash's kernels talk over unix sockets in the
        # server's private runtime directory: on loopback TCP any uid of
        # the sandbox could subscribe to a kernel's output (HMAC signs
        # messages, it does not hide them). Deno's kernel speaks TCP only.
        name = f"kernel-{uuid.uuid4().hex}"
        self.km.connection_file = os.path.join(RUNTIME, name + ".json")
        if kernel != "deno":
            self.km.transport = "ipc"
            self.km.ip = os.path.join(RUNTIME, name)
        env = dict(os.environ)
        env.pop("HUTCH_CODE_INTERPRETER_PORT", None)
        env.pop("HUTCH_CODE_INTERPRETER_FD", None)
        # A directory others may write (/tmp) must not give them code in
        # the kernel: Python then leaves it off sys.path, and Deno starts
        # in the home (it reads deno.json from where it starts), moving to
        # the directory afterwards.
        extra = []
        start_cwd = f"/proc/{os.getpid()}/fd/{dirfd}"
        self.moved = False
        if not safe:
            if kernel == "python3":
                extra.append("--IPKernelApp.ignore_cwd=True")
            elif kernel == "deno":
                home, home_fd, home_safe = open_dir(DEFAULT_CWD)
                os.close(home_fd)
                start_cwd = home if home_safe else "/"
                self.moved = True
        await self.km.start_kernel(cwd=start_cwd, env=env, extra_arguments=extra)
        self.real = real
        self.safe = safe
        await self.ready()

    async def ready(self):
        """Connects to a kernel just started (or restarted) and gives it
        what the start did not."""
        pid = getattr(getattr(self.km, "provisioner", None), "pid", None)
        if pid:
            # The OOM killer takes a kernel (and what its code started)
            # before the server.
            try:
                with open(f"/proc/{pid}/oom_score_adj", "w") as f:
                    f.write("1000")
            except OSError:
                pass
        self.kc = self.km.client()
        self.kc.start_channels()
        await self.kc.wait_for_ready(timeout=120)
        if self.moved:
            await self.run_quiet(f"Deno.chdir({json.dumps(self.real)})")
        if self.safe and KERNELS[self.language] == "python3":
            # -P kept the kernel's own start clean; a notebook imports
            # modules from its directory, as Jupyter's do.
            await self.run_quiet("import sys as __h_sys\nif '' not in __h_sys.path: __h_sys.path.insert(0, '')\ndel __h_sys")

    async def stop(self):
        if self.dirfd is not None:
            os.close(self.dirfd)
            self.dirfd = None
        try:
            if self.kc is not None:
                self.kc.stop_channels()
            if self.km is not None and self.km.has_kernel:
                await self.km.shutdown_kernel(now=True)
        except Exception as e:
            log.warning("context %s: stop: %s", self.id, e)

    async def restart(self):
        """A new kernel for the context, its directory checked again."""
        await self.stop()
        self.km = self.kc = None
        await self.start()

    async def ensure_alive(self):
        """Starts the kernel again if it died since the last execution."""
        if not await self.km.is_alive():
            await self.restart()
            self.restarted = "the kernel had exited: it was started again, and the context's earlier state is gone"

    async def run_quiet(self, code):
        """Runs code the client does not see (env_vars) and waits for it."""
        msg_id = self.kc.execute(code, silent=True, store_history=False, allow_stdin=False)
        await self.wait_idle(msg_id, timeout=30)

    async def wait_idle(self, msg_id, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                msg = await self.kc.get_iopub_msg(timeout=0.5)
            except Exception:
                if not await self.km.is_alive():
                    return
                continue
            if (msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "status"
                    and msg["content"]["execution_state"] == "idle"):
                return

    async def execute(self, code, envs, emit):
        """Runs code, calling emit(dict) for each output message. The caller
        holds the lock; if it is cancelled, it calls interrupt()."""
        await self.ensure_alive()
        if self.restarted:
            await emit({"type": "stderr", "text": f"[{self.restarted}]\n", "timestamp": now_us()})
            self.restarted = None
        if envs:
            setup, self.restore = env_code(self.language, envs)
            await self.run_quiet(setup)
        self.current = self.kc.execute(code, silent=False, store_history=True, allow_stdin=False)
        bound = Bound()
        # Deno's kernel may publish a cell's value and console output after
        # its idle status (its output is relayed by tasks of their own: a
        # value came late in 2 of 6 first executions, and output in ~1 of
        # 10 calls): for it, the end is LATE_RESULT without a message of
        # the cell after the idle status.
        grace = None
        while True:
            try:
                if grace is not None:
                    left = grace - time.monotonic()
                    if left <= 0:
                        break
                    msg = await self.kc.get_iopub_msg(timeout=left)
                else:
                    msg = await self.kc.get_iopub_msg(timeout=1)
            except Exception:
                if grace is not None:
                    break
                if not await self.km.is_alive():
                    self.restarted = "the kernel exited while running the last execution: it was started again, and the context's earlier state is gone"
                    self.restore = None
                    await self.restart()
                    await emit({"type": "error", "name": "KernelDied",
                                "value": "the kernel exited while running this code",
                                "traceback": "The kernel exited while running this code (killed, crashed or out of memory). "
                                             "It was started again, without the context's earlier state."})
                    return
                continue
            if msg["parent_header"].get("msg_id") != self.current:
                continue
            out = to_output(msg)
            if out == "idle":
                if KERNELS[self.language] == "deno":
                    grace = time.monotonic() + LATE_RESULT
                    continue
                break
            if grace is not None:
                # Something came late: wait as long again for more.
                grace = time.monotonic() + LATE_RESULT
            if out is not None:
                out = bound.admit(out)
                if out is not None:
                    await emit(out)
        for note in bound.notes():
            await emit(note)
        await self.put_back()

    async def put_back(self):
        """Gives the environment variables an execution set their old values."""
        restore, self.restore = self.restore, None
        if restore:
            await self.run_quiet(restore)

    async def interrupt(self):
        """Interrupts the cell whose client went away and waits for the
        kernel to be idle again; the caller still holds the lock."""
        try:
            if self.current and await self.km.is_alive():
                await self.km.interrupt_kernel()
                await self.wait_idle(self.current, timeout=10)
            await self.put_back()
        except Exception as e:  # the next execution restarts a dead kernel
            log.warning("context %s: interrupt: %s", self.id, e)


def to_output(msg):
    """Maps one iopub message of an execution to the protocol's message,
    "idle" at its end, or None."""
    t = msg["msg_type"]
    c = msg["content"]
    if t == "stream":
        return {"type": "stdout" if c.get("name") == "stdout" else "stderr", "text": c.get("text", ""), "timestamp": now_us()}
    if t in ("execute_result", "display_data"):
        out = {"type": "result", "is_main_result": t == "execute_result"}
        extra = {}
        for mime, value in c.get("data", {}).items():
            if mime in MIME:
                out[MIME[mime]] = value
            else:
                extra[mime] = value
        if extra:
            out["extra"] = extra
        return out
    if t == "error":
        return {"type": "error", "name": c.get("ename", ""), "value": c.get("evalue", ""),
                "traceback": "\n".join(c.get("traceback", []))}
    if t == "execute_input":
        return {"type": "number_of_executions", "execution_count": c.get("execution_count")}
    if t == "status" and c.get("execution_state") == "idle":
        return "idle"
    return None


class Bound:
    """Keeps one execution's output within MAX_TEXT and MAX_RESULTS."""

    def __init__(self):
        self.text = 0
        self.results = 0
        self.dropped_text = 0
        self.dropped_results = 0

    def admit(self, out):
        if out["type"] in ("stdout", "stderr"):
            n = len(out["text"].encode("utf-8", "replace"))
            if self.text + n > MAX_TEXT:
                room = MAX_TEXT - self.text
                self.dropped_text += n - max(room, 0)
                if room <= 0:
                    self.text = MAX_TEXT
                    return None
                out = dict(out, text=out["text"].encode("utf-8", "replace")[:room].decode("utf-8", "ignore"))
                n = room
            self.text += n
            return out
        if out["type"] == "error":
            # An exception's text is output too (a 30 MB message must not
            # take the server's memory): name, value and traceback share
            # what is left of the text's bound, at least 64 KiB.
            room = max(MAX_TEXT - self.text, 64 << 10)
            for k in ("name", "value", "traceback"):
                v = out.get(k) or ""
                b = v.encode("utf-8", "replace")
                if len(b) > room:
                    self.dropped_text += len(b) - room
                    v = b[:room].decode("utf-8", "ignore")
                out[k] = v
                room = max(room - len(v), 0)
                self.text = min(MAX_TEXT, self.text + len(v))
            return out
        if out["type"] == "result":
            n = len(json.dumps(out))
            if self.results + n > MAX_RESULTS:
                self.dropped_results += n
                return None
            self.results += n
        return out

    def notes(self):
        notes = []
        if self.dropped_text:
            notes.append({"type": "stderr", "timestamp": now_us(),
                          "text": f"\n[output truncated: {self.dropped_text} more bytes of stdout and stderr past the {MAX_TEXT >> 20} MiB an execution may stream]\n"})
        if self.dropped_results:
            notes.append({"type": "stderr", "timestamp": now_us(),
                          "text": f"\n[results dropped: {self.dropped_results} bytes past the {MAX_RESULTS >> 20} MiB of results an execution may stream]\n"})
        return notes


def env_code(language, envs):
    """Code that sets envs in a kernel, and code that puts back what was."""
    for k in envs:
        if not isinstance(k, str) or not k or "=" in k or "\0" in k:
            raise RequestError(400, f"env_vars: invalid name {k!r}")
        if not isinstance(envs[k], str):
            raise RequestError(400, f"env_vars: the value of {k!r} is not a string")
    j = json.dumps(envs)
    if language == "python":
        setup = f"import os as __h_os, json as __h_json\n__hutch_env_saved = {{k: __h_os.environ.get(k) for k in __h_json.loads({j!r})}}\n__h_os.environ.update(__h_json.loads({j!r}))"
        restore = ("for __h_k, __h_v in __hutch_env_saved.items():\n"
                   "    __h_os.environ.pop(__h_k, None) if __h_v is None else __h_os.environ.__setitem__(__h_k, __h_v)\n"
                   "del __hutch_env_saved, __h_k, __h_v, __h_os, __h_json")
        return setup, restore
    if language in ("javascript", "typescript"):
        setup = f"globalThis.__hutchEnvSaved = Object.fromEntries(Object.keys({j}).map(k => [k, Deno.env.get(k)])); for (const [k, v] of Object.entries({j})) Deno.env.set(k, v);"
        restore = "for (const [k, v] of Object.entries(globalThis.__hutchEnvSaved)) { if (v === undefined) Deno.env.delete(k); else Deno.env.set(k, v); } delete globalThis.__hutchEnvSaved;"
        return setup, restore
    # bash
    def q(s):
        return "'" + s.replace("'", "'\\''") + "'"
    for k in envs:
        if not k.replace("_", "a").isalnum() or k[0].isdigit():
            raise RequestError(400, f"env_vars: {k!r} is not a shell variable name")
    saves = "; ".join(f"__hutch_{k}_set=${{{k}+x}}; __hutch_{k}=${{{k}-}}" for k in envs)
    sets = "; ".join(f"export {k}={q(v)}" for k, v in envs.items())
    restores = "; ".join(f"if [ -n \"$__hutch_{k}_set\" ]; then export {k}=\"$__hutch_{k}\"; else unset {k}; fi; unset __hutch_{k} __hutch_{k}_set" for k in envs)
    return saves + "; " + sets, restores


class Server:
    def __init__(self):
        self.contexts = {}
        self.defaults = {}  # language -> context id
        self.starting = {}  # language -> asyncio.Task making its default
        self.pending = 0  # contexts whose kernel is starting
        self.max_contexts = max_contexts()
        self.ready = asyncio.Event()

    async def default_context(self, language):
        if language in self.defaults:
            return self.contexts[self.defaults[language]]
        task = self.starting.get(language)
        if task is None:
            task = asyncio.ensure_future(self.new_context(language, DEFAULT_CWD, default=True))
            self.starting[language] = task
        try:
            return await asyncio.shield(task)
        finally:
            if task.done():
                self.starting.pop(language, None)

    async def new_context(self, language, cwd, default=False):
        if len(self.contexts) + self.pending >= self.max_contexts:
            raise RequestError(429, f"this sandbox has {len(self.contexts) + self.pending} contexts, the most it may have: remove one first")
        ctx = Context(uuid.uuid4().hex if not default else language, language, cwd)
        self.pending += 1
        try:
            await ctx.start()
        except BaseException:
            await ctx.stop()
            raise
        finally:
            self.pending -= 1
        self.contexts[ctx.id] = ctx
        if default:
            self.defaults[language] = ctx.id
        return ctx

    def lookup(self, id):
        ctx = self.contexts.get(id)
        if ctx is None:
            raise RequestError(404, f"context {id!r} not found")
        return ctx

    # Handlers.

    async def health(self, request):
        if not self.ready.is_set():
            return web.Response(status=503, text="starting")
        return web.Response(text="OK")

    async def execute(self, request):
        body = await json_body(request, MAX_EXECUTE_BODY)
        code = body.get("code")
        if not isinstance(code, str):
            raise RequestError(400, "code: a string is required")
        envs = body.get("env_vars") or {}
        if not isinstance(envs, dict):
            raise RequestError(400, "env_vars: an object of strings is required")
        if body.get("context_id"):
            if body.get("language"):
                raise RequestError(400, "context_id and language: give one, not both")
            ctx = self.lookup(body["context_id"])
        else:
            ctx = await self.default_context(language_of(body.get("language")))
        if envs:
            env_code(ctx.language, envs)  # refuses bad names before the stream starts

        resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await resp.prepare(request)

        async def emit(out):
            await resp.write(json.dumps(out).encode() + b"\n")

        async with ctx.lock:
            try:
                await ctx.execute(code, envs, emit)
                await emit({"type": "end_of_execution"})
            except (asyncio.CancelledError, ConnectionResetError):
                # The client went away (its timeout): interrupt the cell and
                # keep the context, before the next execution may start.
                await asyncio.shield(ctx.interrupt())
                raise
        await resp.write_eof()
        return resp

    async def create_context(self, request):
        body = await json_body(request)
        language = language_of(body.get("language"))
        cwd = body.get("cwd") or DEFAULT_CWD
        if not isinstance(cwd, str) or not cwd.startswith("/"):
            raise RequestError(400, "cwd: an absolute path is required")
        ctx = await self.new_context(language, cwd)
        return web.json_response(ctx.json())

    async def list_contexts(self, request):
        return web.json_response([c.json() for c in self.contexts.values()])

    async def remove_context(self, request):
        ctx = self.lookup(request.match_info["id"])
        del self.contexts[ctx.id]
        if self.defaults.get(ctx.language) == ctx.id:
            del self.defaults[ctx.language]
        async with ctx.lock:
            await ctx.stop()
        return web.Response(status=204)

    async def restart_context(self, request):
        ctx = self.lookup(request.match_info["id"])
        async with ctx.lock:
            await ctx.restart()
            ctx.restarted = None
        return web.Response(status=204)


async def json_body(request, limit=MAX_BODY):
    """The request's JSON object ({} for none), read to at most limit
    bytes: a larger body is refused before it is read."""
    if request.content_length is not None and request.content_length > limit:
        raise RequestError(413, f"the request body is larger than {limit} bytes")
    raw = await request.content.read(limit + 1)
    if len(raw) > limit:
        raise RequestError(413, f"the request body is larger than {limit} bytes")
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except Exception:
        raise RequestError(400, "the request body is not JSON")
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object")
    return body


def middleware(auth):
    @web.middleware
    async def mw(request, handler):
        try:
            if request.path != "/health" or request.method != "GET":
                tokens = request.headers.getall("X-Access-Token", [])
                if len(tokens) > 1:
                    raise RequestError(401, "Unauthorized")
                if tokens or request.path == "/execute":
                    status = await auth.status(tokens[0] if tokens else "")
                    if status != 204:
                        raise RequestError(status, "Unauthorized" if status == 401 else "Authentication unavailable")
            return await handler(request)
        except RequestError as e:
            return web.Response(status=e.status, text=e.text)
    return mw


async def main():
    logging.basicConfig(level=logging.INFO, format="code-interpreter: %(message)s")
    srv = Server()
    app = web.Application(middlewares=[middleware(Auth())], client_max_size=MAX_EXECUTE_BODY)
    app.add_routes([
        web.get("/health", srv.health),
        web.post("/execute", srv.execute),
        web.post("/contexts", srv.create_context),
        web.get("/contexts", srv.list_contexts),
        web.delete("/contexts/{id}", srv.remove_context),
        web.post("/contexts/{id}/restart", srv.restart_context),
    ])
    # handler_cancellation: a client that disconnects cancels its handler,
    # which is how a cell learns its client gave up.
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    fds = os.environ.get("HUTCH_CODE_INTERPRETER_FD")
    if fds:
        # The supervisor's listening sockets (supervise.py): held for the
        # sandbox's life, so the port is never free for another to take.
        for fd in fds.split(","):
            await web.SockSite(runner, socket.socket(fileno=int(fd))).start()
    else:
        await web.TCPSite(runner, "::", PORT).start()
    await srv.default_context("python")
    srv.ready.set()
    log.info("ready on port %d", PORT)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, stop.set)
    await stop.wait()
    for ctx in list(srv.contexts.values()):
        await ctx.stop()
    await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
