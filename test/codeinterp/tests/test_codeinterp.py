"""The official E2B code-interpreter Python SDK (e2b-code-interpreter, pinned
in requirements.txt) against a real `hutch serve`: what a user of run_code
checks. Run by test/codeinterp (codeinterp_test.go), which points the SDK
at the server (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY) and requires every
test named in its table to pass. The tests share one sandbox of the SDK's
default template (code-interpreter-v1) and run in file order; test_pause_resume
pauses it, so it comes last.
"""

import asyncio
import base64
import os
import struct
import time

import pytest
from e2b_code_interpreter import (
    AsyncSandbox,
    InvalidArgumentException,
    NotFoundException,
    Sandbox,
    SandboxException,
    TimeoutException,
)
from e2b_code_interpreter.charts import ChartType, LineChart

if not os.environ.get("E2B_API_URL"):
    raise pytest.UsageError("E2B_API_URL is not set: run this suite through `go test ./test/codeinterp`")


@pytest.fixture(scope="module")
def sbx():
    """One sandbox for the whole module, killed at its end."""
    s = Sandbox.create(timeout=600)
    yield s
    s.kill()


def png_size(b64):
    """Checks that b64 is a PNG and returns its width and height."""
    png = base64.b64decode(b64)
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
    assert png[12:16] == b"IHDR", "no IHDR chunk first"
    return struct.unpack(">II", png[16:24])


def test_state_across_calls(sbx):
    first = sbx.run_code("x = 1")
    assert first.error is None
    assert first.results == [], "an assignment has no result"
    second = sbx.run_code("x + 1")
    assert second.error is None
    assert second.text == "2"
    assert len(second.results) == 1
    assert second.results[0].is_main_result


def test_stdout_stderr(sbx):
    out, err, times = [], [], []

    def on_stdout(m):
        out.append(m.line)
        times.append(time.monotonic())

    def on_stderr(m):
        assert m.error
        err.append(m.line)

    execution = sbx.run_code(
        'import sys, time\nprint("first line")\nprint("to stderr", file=sys.stderr)\n'
        'sys.stdout.flush(); sys.stderr.flush()\ntime.sleep(1.5)\nprint("second line")',
        on_stdout=on_stdout,
        on_stderr=on_stderr,
    )
    end = time.monotonic()
    assert execution.error is None
    assert "".join(out) == "first line\nsecond line\n"
    assert "".join(err) == "to stderr\n"
    assert "".join(execution.logs.stdout) == "first line\nsecond line\n"
    assert "".join(execution.logs.stderr) == "to stderr\n"
    # Streamed as printed, not when the cell ended.
    assert end - times[0] >= 1.0, f"the first line came {end - times[0]:.2f} s before the end (not streamed)"


def test_dataframe(sbx):
    execution = sbx.run_code('import pandas as pd\npd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]})')
    assert execution.error is None
    assert len(execution.results) == 1
    r = execution.results[0]
    assert r.is_main_result
    formats = list(r.formats())
    assert "html" in formats and "data" in formats, formats
    assert "<table" in r.html
    assert r.data == {"a": [1, 2, 3], "b": ["x", "y", "z"]}
    assert r.text


def test_matplotlib_chart(sbx):
    execution = sbx.run_code(
        'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [4, 5, 6], label="growth")\n'
        'plt.title("Growth")\nplt.xlabel("Day")\nplt.show()'
    )
    assert execution.error is None
    with_png = [r for r in execution.results if r.png]
    assert len(with_png) == 1, [list(r.formats()) for r in execution.results]
    r = with_png[0]
    assert not r.is_main_result, "plt.show() displays: not the cell's value"
    width, height = png_size(r.png)
    assert width > 100 and height > 100, f"a {width}x{height} PNG"
    assert isinstance(r.chart, LineChart), f"chart {r.chart!r}, formats {list(r.formats())}"
    assert r.chart.type == ChartType.LINE
    assert r.chart.title == "Growth"
    assert r.chart.x_label == "Day"
    assert len(r.chart.elements) == 1
    line = r.chart.elements[0]
    assert line.label == "growth"
    assert [(float(x), float(y)) for x, y in line.points] == [(1, 4), (2, 5), (3, 6)]


def test_exception(sbx):
    errors = []
    execution = sbx.run_code("def f():\n    return 1 / 0\nf()", on_error=errors.append)
    assert execution.error is not None
    assert execution.error.name == "ZeroDivisionError"
    assert execution.error.value == "division by zero"
    assert "ZeroDivisionError" in execution.error.traceback
    assert "f()" in execution.error.traceback
    assert execution.results == []
    assert [e.name for e in errors] == ["ZeroDivisionError"]
    # The kernel goes on.
    assert sbx.run_code("2 * 21").text == "42"


def test_timeout(sbx):
    sbx.run_code('before_timeout = "kept"')
    start = time.monotonic()
    with pytest.raises(TimeoutException):
        sbx.run_code("while True: pass", timeout=3)
    took = time.monotonic() - start
    assert 2.9 <= took < 15, f"the timeout took {took:.1f} s"
    # The server interrupted the loop: the next cell runs, in the same state.
    nxt = sbx.run_code("before_timeout", timeout=30)
    assert nxt.error is None, nxt.error
    assert nxt.text == "'kept'"


def test_contexts(sbx):
    ctx = sbx.create_code_context(language="python", cwd="/tmp")
    assert ctx.id
    assert ctx.language == "python"
    assert ctx.cwd == "/tmp"
    listed = sbx.list_code_contexts()
    assert any(c.id == ctx.id and c.language == "python" and c.cwd == "/tmp" for c in listed), listed

    assert sbx.run_code("import os\nos.getcwd()", context=ctx).text == "'/tmp'"
    # Its own state, apart from the default context's.
    sbx.run_code("only_in_ctx = 5", context=ctx)
    sbx.run_code("only_in_default = 6")
    assert sbx.run_code("only_in_ctx", context=ctx).text == "5"
    assert sbx.run_code("'only_in_default' in globals()", context=ctx).text == "False"
    assert sbx.run_code("'only_in_ctx' in globals()").text == "False"

    # A restart clears its state (and only its).
    sbx.restart_code_context(ctx)
    assert sbx.run_code("'only_in_ctx' in globals()", context=ctx).text == "False"
    assert sbx.run_code("only_in_default").text == "6"

    sbx.remove_code_context(ctx.id)
    after = sbx.list_code_contexts()
    assert all(c.id != ctx.id for c in after), after
    with pytest.raises(NotFoundException):
        sbx.run_code("1", context=ctx)


def test_javascript(sbx):
    first = sbx.run_code('const greeting = "hello from deno"\nlet n = 41', language="javascript")
    assert first.error is None, first.error
    second = sbx.run_code("console.log(greeting)\nn + 1", language="javascript")
    assert second.error is None, second.error
    assert "".join(second.logs.stdout) == "hello from deno\n"
    assert second.text == "42"
    # A JS error is an execution error too.
    thrown = sbx.run_code('throw new TypeError("bad thing")', language="javascript")
    assert thrown.error is not None
    assert "TypeError" in thrown.error.name + ": " + thrown.error.value
    assert "bad thing" in thrown.error.value


def test_typescript(sbx):
    r = sbx.run_code("function twice(x: number): number { return x * 2 }\ntwice(21)", language="typescript")
    assert r.error is None, r.error
    assert r.text == "42"


def test_bash(sbx):
    sbx.run_code("WHO=bash", language="bash")
    r = sbx.run_code('echo "hello from $WHO" | tr a-z A-Z\npwd', language="bash")
    assert r.error is None, r.error
    assert "".join(r.logs.stdout) == "HELLO FROM BASH\n/home/user\n"


def test_envs(sbx):
    r = sbx.run_code('import os\nos.environ["FOO"]', envs={"FOO": "bar"})
    assert r.error is None, r.error
    assert r.text == "'bar'"
    # Per execution, as E2B's: gone from the next one.
    assert sbx.run_code('import os\nos.environ.get("FOO", "unset")').text == "'unset'"


def test_context_and_language(sbx):
    ctx = sbx.create_code_context()
    try:
        with pytest.raises(InvalidArgumentException):
            sbx.run_code("1", context=ctx, language="python")
    finally:
        sbx.remove_code_context(ctx)


def test_unknown_language(sbx):
    with pytest.raises(SandboxException) as e:
        sbx.run_code("1", language="cobol")
    assert not isinstance(e.value, (TimeoutException, NotFoundException)), repr(e.value)
    # The Python SDK shows the server's body: it must say what is wrong.
    assert "400" in str(e.value) and "cobol" in str(e.value), str(e.value)
    # Nor is a context made for it.
    with pytest.raises(SandboxException):
        sbx.create_code_context(language="cobol")


def test_async_sdk(sbx):
    """AsyncSandbox, connected to the same sandbox: state, streaming
    callbacks (async ones) and an error, as with the sync API."""

    async def main():
        a = await AsyncSandbox.connect(sbx.sandbox_id)
        await a.run_code("async_v = 7")
        out = []

        async def on_stdout(m):
            out.append(m.line)

        r = await a.run_code("print(async_v)\nasync_v * 6", on_stdout=on_stdout)
        assert r.error is None, r.error
        assert r.text == "42"
        assert "".join(out) == "7\n"
        e = await a.run_code("undefined_name")
        assert e.error is not None and e.error.name == "NameError"
        with pytest.raises(TimeoutException):
            await a.run_code("import time\ntime.sleep(30)", timeout=2)
        assert (await a.run_code("async_v", timeout=30)).text == "7"

    asyncio.run(main())


def test_pause_resume(sbx):
    sbx.run_code('kept = "before the pause"')
    sbx.pause()
    assert Sandbox.get_info(sbx.sandbox_id).state.value == "paused"
    again = Sandbox.connect(sbx.sandbox_id)
    r = again.run_code("kept")
    assert r.error is None, r.error
    assert r.text == "'before the pause'"
