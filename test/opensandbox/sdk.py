"""The OpenSandbox Python SDK (opensandbox, pinned in requirements.txt),
unchanged, through the calls a user makes, against the server that
OPEN_SANDBOX_DOMAIN and OPEN_SANDBOX_API_KEY name. js/sdk.mjs makes the same
calls with the TypeScript SDK. Each step prints one JSON line,
{"step": name, ...what it saw} or {"step": name, "error": {...}}; a failed step
does not stop the ones after it. The Go test (sdk_test.go) judges the lines.

Environment: OSB_TEMPLATE (a Hutch template name), OSB_IMAGE (an image on
the test's registry), OSB_TAG (metadata value of this run's sandboxes),
OSB_HOST_SECRET (a file on the host no sandbox may read).
"""

import asyncio
import json
import os
import sys
from datetime import timedelta

import httpx

from opensandbox import Sandbox, SandboxManager
from opensandbox.exceptions import SandboxApiException
from opensandbox.models.execd import RunCommandOpts
from opensandbox.models.filesystem import ContentReplaceEntry, MoveEntry, SearchEntry, WriteEntry
from opensandbox.models.sandboxes import SandboxFilter

def emit(step, **fields):
    print(json.dumps({"step": step, **fields}, default=str), flush=True)


def error_of(e):
    """What a user sees of a failure: the HTTP status and OpenSandbox's code."""
    out = {"type": type(e).__name__, "message": str(e)}
    if isinstance(e, SandboxApiException):
        out["status"] = e.status_code
    err = getattr(e, "error", None)
    if err is not None:
        out["code"] = err.code
    return out


async def step(name, fn):
    try:
        fields = await fn()
    except Exception as e:  # the Go test judges every failure
        emit(name, error=error_of(e))
        return None
    emit(name, **(fields or {}))
    return fields


def iso(t):
    return t.isoformat() if t is not None else None


def lines(messages):
    """The lines of stdout or stderr messages, however execd split them."""
    return [l for m in messages for l in m.text.splitlines() if l != ""]


async def run(sbx, command, **opts):
    ex = await sbx.commands.run(command, opts=RunCommandOpts(**opts))
    return {"stdout": lines(ex.logs.stdout), "stderr": lines(ex.logs.stderr), "exit_code": ex.exit_code}


async def main():
    template, image, tag = os.environ["OSB_TEMPLATE"], os.environ["OSB_IMAGE"], os.environ["OSB_TAG"]
    sbx = None
    image_sbx = None
    created = {}

    async def create():
        nonlocal sbx
        sbx = await Sandbox.create(
            template,
            timeout=timedelta(minutes=5),
            env={"OSB_ENV": "from-create"},
            metadata={"osbtest": tag},
            resource={"cpu": "1", "memory": "1Gi"},
        )
        info = await sbx.get_info()
        created.update(id=sbx.id, expires_at=iso(info.expires_at))
        return {"id": sbx.id, "state": info.status.state, "expires_at": iso(info.expires_at)}

    await step("create", create)
    if sbx is None:
        return

    async def info():
        i = await sbx.get_info()
        return {"id": i.id, "state": i.status.state, "metadata": i.metadata,
                "image": i.image.image if i.image else None}

    await step("info", info)
    await step("healthy", lambda: _healthy(sbx))
    await step("run", lambda: run(sbx, "echo hello; echo oops >&2; echo $OSB_ENV"))
    await step("run-exit", lambda: run(sbx, "echo before; exit 3"))
    await step("run-cwd", lambda: run(sbx, "pwd", working_directory="/tmp"))

    d = "/tmp/osb-" + tag
    await step("mkdir", lambda: _none(sbx.files.create_directories([WriteEntry(path=d + "/sub", mode=755)])))
    await step("write", lambda: _none(sbx.files.write_file(d + "/a.txt", "alpha beta alpha\n")))
    await step("read", lambda: _content(sbx.files.read_file(d + "/a.txt")))
    await step("read-range", lambda: _content(sbx.files.read_file(d + "/a.txt", range_header="bytes=0-4")))
    await step("search", lambda: _paths(sbx.files.search(SearchEntry(path=d, pattern="*.txt"))))
    await step("move", lambda: _none(sbx.files.move_files([MoveEntry(src=d + "/a.txt", dest=d + "/sub/b.txt")])))
    await step("search-moved", lambda: _paths(sbx.files.search(SearchEntry(path=d, pattern="*.txt"))))

    async def replace():
        res = await sbx.files.replace_contents_detailed(
            [ContentReplaceEntry(path=d + "/sub/b.txt", old_content="alpha", new_content="omega")])
        return {"results": [{"path": r.path, "replaced": r.replaced_count} for r in res]}

    await step("replace", replace)
    await step("read-replaced", lambda: _content(sbx.files.read_file(d + "/sub/b.txt")))
    await step("delete", lambda: _none(sbx.files.delete_files([d + "/sub/b.txt"])))
    await step("read-deleted", lambda: _content(sbx.files.read_file(d + "/sub/b.txt")))
    await step("rmdir", lambda: _none(sbx.files.delete_directories([d])))
    await step("rmdir-gone", lambda: run(sbx, f"test -e {d}; echo $?"))
    # Traversal stays inside the sandbox: its own /etc/hostname, whatever
    # the ../ (execd resolves paths in the sandbox, not on the host).
    await step("read-traversal", lambda: _content(sbx.files.read_file("/tmp/../../../../../etc/hostname")))
    await step("hostname", lambda: run(sbx, "cat /etc/hostname"))
    # A host file, however many ../ lead to it, is not the sandbox's.
    await step("read-host-secret", lambda: _content(sbx.files.read_file("/../../../../.." + os.environ["OSB_HOST_SECRET"])))

    async def endpoint_execd():
        ep = await sbx.get_endpoint(44772)
        return {"endpoint": ep.endpoint, "headers": sorted(ep.headers or {})}

    await step("endpoint-execd", endpoint_execd)

    async def endpoint_http():
        await sbx.files.write_file("/tmp/www/index.html", "served " + tag + "\n")
        await sbx.commands.run("cd /tmp/www && exec python3 -m http.server 8080",
                               opts=RunCommandOpts(background=True))
        ep = await sbx.get_endpoint(8080)
        url = f"{sbx.connection_config.protocol}://{ep.endpoint}/index.html"
        # The server in the sandbox takes a moment to listen: retried
        # until it answers or 30 s pass.
        async with httpx.AsyncClient(timeout=10) as c:
            last = None
            for _ in range(150):
                try:
                    r = await c.get(url, headers=ep.headers or {})
                    if r.status_code == 200:
                        return {"endpoint": ep.endpoint, "status": r.status_code, "body": r.text}
                    last = f"{r.status_code} {r.text[:200]}"
                except httpx.HTTPError as e:
                    last = repr(e)
                await asyncio.sleep(0.2)
            return {"endpoint": ep.endpoint, "status": None, "body": last}

    await step("endpoint-http", endpoint_http)

    async def metrics():
        m = await sbx.get_metrics()
        return {"cpu_count": m.cpu_count, "memory_total_mib": m.memory_total_in_mib,
                "memory_used_mib": m.memory_used_in_mib, "timestamp": m.timestamp}

    await step("metrics", metrics)

    async def renew():
        r = await sbx.renew(timedelta(minutes=20))
        i = await sbx.get_info()
        return {"old": created.get("expires_at"), "new": iso(r.expires_at), "info": iso(i.expires_at)}

    await step("renew", renew)

    async def create_image():
        nonlocal image_sbx
        image_sbx = await Sandbox.create(image, timeout=timedelta(minutes=5), metadata={"osbtest": tag})
        i = await image_sbx.get_info()
        return {"id": image_sbx.id, "state": i.status.state, "image": i.image.image if i.image else None}

    await step("create-image", create_image)
    if image_sbx is not None:
        await step("image-run", lambda: run(image_sbx, "cat /etc/osb-mark; id -u"))

    async def listed():
        mgr = await SandboxManager.create()
        try:
            page = await mgr.list_sandbox_infos(SandboxFilter(metadata={"osbtest": tag}))
            return {"ids": sorted(i.id for i in page.sandbox_infos),
                    "states": sorted({i.status.state for i in page.sandbox_infos})}
        finally:
            await mgr.close()

    await step("list", listed)

    async def kill():
        ids = []
        for s in (sbx, image_sbx):
            if s is not None:
                await s.kill()
                ids.append(s.id)
                await s.close()
        return {"ids": ids}

    await step("kill", kill)

    async def info_killed():
        mgr = await SandboxManager.create()
        try:
            await mgr.get_sandbox_info(created["id"])
            return {"found": True}
        finally:
            await mgr.close()

    await step("info-killed", info_killed)


async def _healthy(sbx):
    return {"healthy": await sbx.is_healthy()}


async def _none(aw):
    await aw
    return {}


async def _content(aw):
    return {"content": await aw}


async def _paths(aw):
    return {"paths": sorted(e.path for e in await aw)}


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
