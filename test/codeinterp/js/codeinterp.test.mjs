// The official E2B code-interpreter JS SDK (@e2b/code-interpreter, pinned
// in package.json) against a real `hutch serve`: what a user of runCode
// checks. Run by test/codeinterp (codeinterp_test.go), which points the
// SDK at the server (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY) and
// requires every test named in its table to pass. The tests share one
// sandbox of the SDK's default template (code-interpreter-v1) and run in
// order; pause_resume pauses it, so it comes last.
import { after, before, test } from 'node:test'
import assert from 'node:assert/strict'
import {
  InvalidArgumentError,
  NotFoundError,
  Sandbox,
  SandboxError,
  TimeoutError,
} from '@e2b/code-interpreter'

// Each test's own bound: nothing may hang the run.
const opts = { timeout: 90_000 }

// refused is the option of a runCode the server refuses (404, 400): the
// SDK arms a timer of requestTimeoutMs (60 s by default) for the request
// and clears it only once the response is accepted, so a refusal leaves
// it armed and node would wait for it before exiting.
const refused = { requestTimeoutMs: 5_000 }

let sbx
before(async () => {
  const start = Date.now()
  sbx = await Sandbox.create({ timeoutMs: 600_000 })
  console.log(`sandbox ${sbx.sandboxId} created in ${Date.now() - start} ms`)
})
after(async () => {
  const start = Date.now()
  await sbx?.kill()
  console.log(`sandbox killed in ${Date.now() - start} ms`)
})

// pngSize checks that b64 is a PNG and returns its width and height.
function pngSize(b64) {
  const png = Buffer.from(b64, 'base64')
  assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], 'not a PNG signature')
  assert.equal(png.subarray(12, 16).toString('latin1'), 'IHDR', 'no IHDR chunk first')
  return { width: png.readUInt32BE(16), height: png.readUInt32BE(20) }
}

test('state_across_calls', opts, async () => {
  const first = await sbx.runCode('x = 1')
  assert.equal(first.error, undefined)
  assert.deepEqual(first.results, [], 'an assignment has no result')
  const second = await sbx.runCode('x + 1')
  assert.equal(second.error, undefined)
  assert.equal(second.text, '2')
  assert.equal(second.results.length, 1)
  assert.equal(second.results[0].isMainResult, true)
})

test('stdout_stderr', opts, async () => {
  const out = []
  const err = []
  const times = []
  const execution = await sbx.runCode(
    'import sys, time\nprint("first line")\nprint("to stderr", file=sys.stderr)\nsys.stdout.flush(); sys.stderr.flush()\ntime.sleep(1.5)\nprint("second line")',
    {
      onStdout: (m) => { out.push(m.line); times.push(Date.now()) },
      onStderr: (m) => { err.push(m.line); assert.equal(m.error, true) },
    },
  )
  const end = Date.now()
  assert.equal(execution.error, undefined)
  assert.equal(out.join(''), 'first line\nsecond line\n')
  assert.equal(err.join(''), 'to stderr\n')
  assert.equal(execution.logs.stdout.join(''), 'first line\nsecond line\n')
  assert.equal(execution.logs.stderr.join(''), 'to stderr\n')
  // Streamed as printed, not when the cell ended.
  assert.ok(end - times[0] >= 1000, `the first line came ${end - times[0]} ms before the end, want >= 1000 (not streamed)`)
})

test('dataframe', opts, async () => {
  const execution = await sbx.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]})')
  assert.equal(execution.error, undefined)
  assert.equal(execution.results.length, 1)
  const r = execution.results[0]
  assert.equal(r.isMainResult, true)
  const formats = r.formats()
  assert.ok(formats.includes('html') && formats.includes('data'), 'formats ' + JSON.stringify(formats))
  assert.match(r.html, /<table/)
  assert.deepEqual(r.data, { a: [1, 2, 3], b: ['x', 'y', 'z'] })
  assert.ok(r.text, 'no text/plain')
})

test('matplotlib_chart', opts, async () => {
  const execution = await sbx.runCode(
    'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [4, 5, 6], label="growth")\nplt.title("Growth")\nplt.xlabel("Day")\nplt.show()',
  )
  assert.equal(execution.error, undefined)
  const withPng = execution.results.filter((r) => r.png)
  assert.equal(withPng.length, 1, 'results: ' + JSON.stringify(execution.results.map((r) => r.formats())))
  const r = withPng[0]
  assert.equal(r.isMainResult, false, 'plt.show() displays: not the cell\'s value')
  const { width, height } = pngSize(r.png)
  assert.ok(width > 100 && height > 100, `a ${width}x${height} PNG`)
  assert.ok(r.chart, 'no chart: ' + JSON.stringify(Object.keys(r.raw)))
  assert.equal(r.chart.type, 'line')
  assert.equal(r.chart.title, 'Growth')
  assert.equal(r.chart.x_label, 'Day')
  assert.equal(r.chart.elements.length, 1)
  assert.equal(r.chart.elements[0].label, 'growth')
  assert.deepEqual(r.chart.elements[0].points.map(([x, y]) => [Number(x), Number(y)]), [[1, 4], [2, 5], [3, 6]])
})

test('exception', opts, async () => {
  const errors = []
  const execution = await sbx.runCode('def f():\n    return 1 / 0\nf()', { onError: (e) => errors.push(e) })
  assert.ok(execution.error, 'no error')
  assert.equal(execution.error.name, 'ZeroDivisionError')
  assert.equal(execution.error.value, 'division by zero')
  assert.match(execution.error.traceback, /ZeroDivisionError/)
  assert.match(execution.error.traceback, /f\(\)/)
  assert.deepEqual(execution.results, [])
  assert.equal(errors.length, 1)
  assert.equal(errors[0].name, 'ZeroDivisionError')
  // The kernel goes on.
  assert.equal((await sbx.runCode('2 * 21')).text, '42')
})

test('timeout', opts, async () => {
  await sbx.runCode('before_timeout = "kept"')
  const start = Date.now()
  await assert.rejects(sbx.runCode('while True: pass', { timeoutMs: 3000 }), TimeoutError)
  const took = Date.now() - start
  assert.ok(took >= 2900 && took < 15_000, `the timeout took ${took} ms`)
  // The server interrupted the loop: the next cell runs, in the same
  // state.
  const next = await sbx.runCode('before_timeout', { timeoutMs: 30_000 })
  assert.equal(next.error, undefined, JSON.stringify(next.error))
  assert.equal(next.text, "'kept'")
})

test('contexts', opts, async () => {
  const ctx = await sbx.createCodeContext({ language: 'python', cwd: '/tmp' })
  assert.ok(ctx.id, 'no id')
  assert.equal(ctx.language, 'python')
  assert.equal(ctx.cwd, '/tmp')
  const listed = await sbx.listCodeContexts()
  assert.ok(listed.some((c) => c.id === ctx.id && c.language === 'python' && c.cwd === '/tmp'), 'not listed: ' + JSON.stringify(listed))

  assert.equal((await sbx.runCode('import os\nos.getcwd()', { context: ctx })).text, "'/tmp'")
  // Its own state, apart from the default context's.
  await sbx.runCode('only_in_ctx = 5', { context: ctx })
  await sbx.runCode('only_in_default = 6')
  assert.equal((await sbx.runCode('only_in_ctx', { context: ctx })).text, '5')
  assert.equal((await sbx.runCode("'only_in_default' in globals()", { context: ctx })).text, 'False')
  assert.equal((await sbx.runCode("'only_in_ctx' in globals()")).text, 'False')

  // A restart clears its state (and only its).
  await sbx.restartCodeContext(ctx)
  assert.equal((await sbx.runCode("'only_in_ctx' in globals()", { context: ctx })).text, 'False')
  assert.equal((await sbx.runCode('only_in_default')).text, '6')

  await sbx.removeCodeContext(ctx.id)
  const after = await sbx.listCodeContexts()
  assert.ok(!after.some((c) => c.id === ctx.id), 'still listed: ' + JSON.stringify(after))
  await assert.rejects(sbx.runCode('1', { context: ctx, ...refused }), NotFoundError)
})

test('javascript', opts, async () => {
  const first = await sbx.runCode('const greeting = "hello from deno"\nlet n = 41', { language: 'javascript' })
  assert.equal(first.error, undefined, JSON.stringify(first.error))
  const second = await sbx.runCode('console.log(greeting)\nn + 1', { language: 'javascript' })
  assert.equal(second.error, undefined, JSON.stringify(second.error))
  assert.equal(second.logs.stdout.join(''), 'hello from deno\n')
  assert.equal(second.text, '42')
  // A JS error is an execution error too.
  const thrown = await sbx.runCode('throw new TypeError("bad thing")', { language: 'javascript' })
  assert.ok(thrown.error, 'no error')
  assert.match(thrown.error.name + ': ' + thrown.error.value, /TypeError.*bad thing/)
})

test('typescript', opts, async () => {
  const r = await sbx.runCode('function twice(x: number): number { return x * 2 }\ntwice(21)', { language: 'typescript' })
  assert.equal(r.error, undefined, JSON.stringify(r.error))
  assert.equal(r.text, '42')
})

test('bash', opts, async () => {
  await sbx.runCode('WHO=bash', { language: 'bash' })
  const r = await sbx.runCode('echo "hello from $WHO" | tr a-z A-Z\npwd', { language: 'bash' })
  assert.equal(r.error, undefined, JSON.stringify(r.error))
  assert.equal(r.logs.stdout.join(''), 'HELLO FROM BASH\n/home/user\n')
})

test('envs', opts, async () => {
  const r = await sbx.runCode('import os\nos.environ["FOO"]', { envs: { FOO: 'bar' } })
  assert.equal(r.error, undefined, JSON.stringify(r.error))
  assert.equal(r.text, "'bar'")
  // Per execution, as E2B's: gone from the next one.
  const next = await sbx.runCode('import os\nos.environ.get("FOO", "unset")')
  assert.equal(next.text, "'unset'")
})

test('context_and_language', opts, async () => {
  const ctx = await sbx.createCodeContext()
  try {
    await assert.rejects(sbx.runCode('1', { context: ctx, language: 'python' }), InvalidArgumentError)
  } finally {
    await sbx.removeCodeContext(ctx)
  }
})

test('unknown_language', opts, async () => {
  await assert.rejects(sbx.runCode('1', { language: 'cobol', ...refused }), (err) => {
    assert.ok(err instanceof SandboxError, `${err?.name}: ${err?.message}`)
    assert.ok(!(err instanceof TimeoutError) && !(err instanceof NotFoundError), `${err?.name}: ${err?.message}`)
    assert.match(err.message, /400/)
    return true
  })
  // Nor is a context made for it.
  await assert.rejects(sbx.createCodeContext({ language: 'cobol' }), SandboxError)
})

test('pause_resume', opts, async () => {
  await sbx.runCode('kept = "before the pause"')
  await sbx.pause()
  assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused')
  const again = await Sandbox.connect(sbx.sandboxId)
  const r = await again.runCode('kept')
  assert.equal(r.error, undefined, JSON.stringify(r.error))
  assert.equal(r.text, "'before the pause'")
})
