"""Shared fixtures of the pytest suite that runs the official E2B Python SDK
against a real `hutch serve` (driven by test/e2bpy/e2bpy_test.go).

The suite is the same in both modes; only the environment says which:

- http: E2B_API_URL and E2B_SANDBOX_URL point at hutch serve's one plain
  HTTP listener (hutchtest.Server.SDKEnv);
- domain: E2B_DOMAIN names the server's domain, served over TLS on :443
  (api.D, <port>-<id>.D), with SSL_CERT_FILE the server's CA
  (hutchtest.Server.DomainEnv).
"""

import os
import secrets
import ssl
import time

import httpx
import pytest
from e2b import Sandbox

HOME = "/home/user"

if os.environ.get("E2B_API_URL"):
    MODE = "http"
elif os.environ.get("E2B_DOMAIN"):
    MODE = "domain"
else:
    raise pytest.UsageError(
        "neither E2B_API_URL nor E2B_DOMAIN is set: run this suite through `go test ./test/e2bpy`"
    )

# The runtime backend the server runs sandboxes on (its --runtime), which
# Hutch adds to every sandbox's metadata as hutch.runtime.
RUNTIME = os.environ.get("HUTCH_RUNTIME", "native")


def pytest_report_header(config):
    where = os.environ.get("E2B_API_URL") if MODE == "http" else "https://api." + os.environ["E2B_DOMAIN"]
    return f"hutch e2b mode: {MODE} ({where})"


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"hutch e2b mode: {MODE}")


def with_runtime(md):
    """Metadata as Hutch reports it: with hutch.runtime."""
    return {**md, "hutch.runtime": RUNTIME}


def unique(prefix):
    """A name no other test uses."""
    return f"{prefix}-{secrets.token_hex(6)}"


def wait_for(cond, timeout=10.0, what="condition"):
    """Polls cond until it returns a truthy value, which it returns, or
    fails the test after timeout seconds; what (a string, or a function
    called on failure) says what was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what() if callable(what) else what}")
        time.sleep(0.05)


async def await_for(cond, timeout=10.0, what="condition"):
    """wait_for for an async cond."""
    import asyncio

    deadline = time.monotonic() + timeout
    while True:
        v = await cond()
        if v:
            return v
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what() if callable(what) else what}")
        await asyncio.sleep(0.05)


def http_client():
    """A plain HTTP client, as a user would fetch a signed URL with: it
    trusts SSL_CERT_FILE when set (the server's CA in domain mode)."""
    ca = os.environ.get("SSL_CERT_FILE")
    return httpx.Client(verify=ssl.create_default_context(cafile=ca) if ca else True, timeout=30)


@pytest.fixture(scope="module")
def sbx():
    """One sandbox for a whole test module, killed at its end."""
    s = Sandbox.create(timeout=600)
    yield s
    s.kill()
