"""Sandbox lifecycle through the control plane with the sync API: create
and its options, get_info, list with filters and pages, set_timeout,
connect, kill, is_running, get_metrics, and the SDK's exceptions."""

import re
from datetime import datetime, timedelta, timezone

import pytest
from e2b import (
    AuthenticationException,
    Sandbox,
    SandboxNotFoundException,
    SandboxQuery,
    SandboxState,
)

from conftest import unique, wait_for, with_runtime

UNKNOWN = "inosuchsandbox0000000"


def test_create_get_info_list_connect_kill():
    tag = unique("suite")
    sbx = Sandbox.create(
        "base",
        timeout=120,
        metadata={"suite": tag, "k y": "v&=1"},
        envs={"GREETING": "hi"},
        secure=True,
        allow_internet_access=False,
    )
    assert re.fullmatch(r"i[a-z0-9]{20}", sbx.sandbox_id)
    assert sbx.commands.run('echo "$GREETING"').stdout == "hi\n"

    info = sbx.get_info()
    assert info.sandbox_id == sbx.sandbox_id
    assert info.template_id == "base"
    assert info.state == SandboxState.RUNNING
    assert info.metadata == with_runtime({"suite": tag, "k y": "v&=1"})
    assert info.allow_internet_access is False
    assert info.end_at - info.started_at == timedelta(seconds=120)
    assert Sandbox.get_info(sbx.sandbox_id).sandbox_id == sbx.sandbox_id

    page = Sandbox.list(query=SandboxQuery(metadata={"suite": tag, "k y": "v&=1"})).next_items()
    assert [s.sandbox_id for s in page] == [sbx.sandbox_id]
    assert page[0].metadata == with_runtime({"suite": tag, "k y": "v&=1"})
    assert Sandbox.list(query=SandboxQuery(metadata={"suite": tag, "k y": "other"})).next_items() == []

    # set_timeout may shorten; connect only extends.
    sbx.set_timeout(60)
    shorter = sbx.get_info().end_at
    assert shorter < info.end_at, "set_timeout did not shorten the life"
    again = Sandbox.connect(sbx.sandbox_id, timeout=30)
    assert again.commands.run("echo connected").stdout == "connected\n"
    assert sbx.get_info().end_at == shorter, "connect shortened the life"

    assert sbx.is_running() is True
    assert sbx.kill() is True
    assert Sandbox.kill(sbx.sandbox_id) is False
    assert sbx.is_running() is False
    with pytest.raises(SandboxNotFoundException):
        sbx.get_info()


def test_list_filters_state_template_started_after_and_pages():
    tag = unique("page")
    before = datetime.now(timezone.utc) - timedelta(seconds=5)
    made = [Sandbox.create(metadata={"page": tag}, timeout=120) for _ in range(3)]
    try:
        ids = sorted(s.sandbox_id for s in made)
        seen, pages = [], 0
        p = Sandbox.list(query=SandboxQuery(metadata={"page": tag}), limit=2)
        while p.has_next:
            items = p.next_items()
            assert len(items) <= 2
            seen += [s.sandbox_id for s in items]
            pages += 1
        assert sorted(seen) == ids
        assert pages >= 2

        def listed(**query):
            return sorted(s.sandbox_id for s in Sandbox.list(query=SandboxQuery(metadata={"page": tag}, **query)).next_items())

        assert listed(state=[SandboxState.RUNNING]) == ids
        assert listed(state=[SandboxState.PAUSED]) == []
        assert listed(template="base") == ids
        assert listed(started_after=before) == ids
        assert listed(started_after=datetime.now(timezone.utc) + timedelta(hours=1)) == []
    finally:
        for s in made:
            s.kill()


def test_expired_sandbox_is_gone():
    sbx = Sandbox.create(timeout=1)
    wait_for(lambda: not sbx.is_running(), 20, "the sandbox to expire")
    with pytest.raises(SandboxNotFoundException):
        Sandbox.connect(sbx.sandbox_id)


def test_errors_unknown_sandbox_and_wrong_key():
    with pytest.raises(SandboxNotFoundException):
        Sandbox.connect(UNKNOWN)
    with pytest.raises(SandboxNotFoundException):
        Sandbox.get_info(UNKNOWN)
    assert Sandbox.kill(UNKNOWN) is False
    with pytest.raises(AuthenticationException):
        Sandbox.create(api_key="e2b_" + "0" * 40)
    with pytest.raises(AuthenticationException):
        Sandbox.list(api_key="e2b_" + "0" * 40).next_items()


def test_get_metrics():
    sbx = Sandbox.create(timeout=120)
    try:
        first = wait_for(lambda: sbx.get_metrics(), 10, "a first sample")[0]
        assert first.cpu_count == 1
        assert first.mem_total == 512 * 1024 * 1024, "mem_total is the sandbox's limit"
        assert 0 < first.mem_used < first.mem_total
        assert first.disk_total > 0 and first.disk_used <= first.disk_total
        assert abs(first.timestamp - datetime.now(timezone.utc)) < timedelta(minutes=1)
        assert sbx.get_metrics(start=datetime.now(timezone.utc) + timedelta(hours=1)) == []
    finally:
        sbx.kill()
    with pytest.raises(SandboxNotFoundException):
        sbx.get_metrics()


def test_context_manager_kills():
    with Sandbox.create(timeout=60) as sbx:
        assert sbx.commands.run("echo inside").stdout == "inside\n"
    assert sbx.is_running() is False, "leaving the with block kills the sandbox"
    with pytest.raises(SandboxNotFoundException):
        Sandbox.get_info(sbx.sandbox_id)
