"""Bad calls through the OpenSandbox Python SDK (pinned in requirements.txt),
as sdk.py prints them: one JSON line per step, {"step": name, "error":
{"status", "code", ...}} for a call that failed. js/errors.mjs makes the same
calls with the TypeScript SDK; the Go test (errors_test.go) judges both.

Environment: OPEN_SANDBOX_DOMAIN, OPEN_SANDBOX_API_KEY, OSB_TEMPLATE,
OSB_MISSING_IMAGE (a reference on the test's registry that does not exist).
"""

import asyncio
import os
from datetime import timedelta

from opensandbox import Sandbox, SandboxManager
from opensandbox.config import ConnectionConfig
from opensandbox.models.sandboxes import SandboxFilter

from sdk import step

TEMPLATE = os.environ["OSB_TEMPLATE"]
UNKNOWN = "osbtest-no-such-sandbox"


async def with_manager(fn, **config):
    mgr = await SandboxManager.create(connection_config=ConnectionConfig(**config) if config else None)
    try:
        await fn(mgr)
        return {}
    finally:
        await mgr.close()


async def created(**kwargs):
    # Reached only when the server accepted what it should have refused.
    sbx = await Sandbox.create(ready_timeout=timedelta(seconds=60), **kwargs)
    await sbx.kill()
    await sbx.close()
    return {"id": sbx.id}


async def main():
    await step("unknown-id", lambda: with_manager(lambda m: m.get_sandbox_info(UNKNOWN)))
    await step("kill-unknown", lambda: with_manager(lambda m: m.kill_sandbox(UNKNOWN)))
    await step("renew-unknown", lambda: with_manager(lambda m: m.renew_sandbox(UNKNOWN, timedelta(minutes=10))))
    await step("wrong-key", lambda: with_manager(lambda m: m.list_sandbox_infos(SandboxFilter()), api_key="wrong-key"))
    await step("missing-image", lambda: created(image=os.environ["OSB_MISSING_IMAGE"]))
    await step("bad-resource", lambda: created(image=TEMPLATE, resource={"cpu": "lots", "memory": "1Gi"}))
    await step("short-timeout", lambda: created(image=TEMPLATE, timeout=timedelta(seconds=30)))


if __name__ == "__main__":
    asyncio.run(main())
