// sandbox.commands: foreground and background commands, stdin, kill,
// disconnect/reconnect, timeouts.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { CommandExitError, TimeoutError } from 'e2b'
import { throughServe, connect, unique, waitFor, sleep } from './helpers.mjs'

const sbx = await connect()

test('run: stdout, stderr and exit code', async () => {
  const r = await sbx.commands.run('echo hello; echo oops >&2')
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'hello\n')
  assert.equal(r.stderr, 'oops\n')
  assert.equal(r.error, undefined)
})

test('run: non-zero exit throws CommandExitError', async () => {
  await assert.rejects(sbx.commands.run('echo partial; echo bad >&2; exit 3'), (err) => {
    assert.ok(err instanceof CommandExitError, `got ${err?.constructor?.name}: ${err}`)
    assert.equal(err.exitCode, 3)
    assert.equal(err.stdout, 'partial\n')
    assert.equal(err.stderr, 'bad\n')
    return true
  })
})

test('run: default user, home and cwd', async () => {
  const r = await sbx.commands.run('id -un; id -u; echo "$HOME"; pwd')
  assert.equal(r.stdout, 'user\n1000\n/home/user\n/home/user\n')
})

test('run: envs', async () => {
  const r = await sbx.commands.run('echo "$FOO/$BAR"', { envs: { FOO: 'foo value', BAR: 'b=r' } })
  assert.equal(r.stdout, 'foo value/b=r\n')
})

test('run: cwd', async () => {
  const r = await sbx.commands.run('pwd', { cwd: '/tmp' })
  assert.equal(r.stdout, '/tmp\n')
})

test("run: user 'root'", async () => {
  const r = await sbx.commands.run('id -u; echo "$HOME"; pwd', { user: 'root' })
  assert.equal(r.stdout, '0\n/root\n/root\n')
})

test('run: timeoutMs kills a long command with a TimeoutError', async () => {
  const marker = unique('timeout')
  const started = Date.now()
  await assert.rejects(sbx.commands.run(`sleep 10; : ${marker}`, { timeoutMs: 1500 }), (err) => {
    assert.ok(err instanceof TimeoutError, `got ${err?.constructor?.name}: ${err}`)
    return true
  })
  const took = Date.now() - started
  assert.ok(took < 8000, `timeout took ${took} ms`)
  // The server kills the process at the deadline.
  await waitFor(
    async () => !(await sbx.commands.list()).some((p) => p.args.join(' ').includes(marker)),
    5000,
    'the timed-out process to disappear from commands.list()',
  )
})

test('run: onStdout and onStderr callbacks receive the output as it comes', async () => {
  const out = []
  const errs = []
  const r = await sbx.commands.run('for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.1; done', {
    onStdout: (d) => out.push(d),
    onStderr: (d) => errs.push(d),
  })
  assert.equal(r.stdout, 'out1\nout2\nout3\n')
  assert.equal(r.stderr, 'err1\nerr2\nerr3\n')
  assert.equal(out.join(''), r.stdout)
  assert.equal(errs.join(''), r.stderr)
  assert.ok(out.length >= 2, `expected streamed chunks, got ${JSON.stringify(out)}`)
})

test('run: large output arrives whole', async () => {
  const r = await sbx.commands.run('head -c 300000 /dev/zero | tr "\\0" x')
  assert.equal(r.stdout.length, 300000)
  assert.match(r.stdout, /^x+$/)
})

test('background: handle, list, wait', async () => {
  const marker = unique('bg')
  const h = await sbx.commands.run(`sleep 0.5; echo done; : ${marker}`, { background: true })
  assert.ok(Number.isInteger(h.pid) && h.pid > 0, `pid ${h.pid}`)
  const procs = await sbx.commands.list()
  const p = procs.find((p) => p.pid === h.pid)
  assert.ok(p, `pid ${h.pid} not in commands.list(): ${JSON.stringify(procs)}`)
  assert.equal(p.cmd, '/bin/bash')
  assert.ok(p.args.join(' ').includes(marker), `args ${JSON.stringify(p.args)}`)
  const r = await h.wait()
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'done\n')
  assert.equal(h.exitCode, 0)
  await waitFor(async () => !(await sbx.commands.list()).some((q) => q.pid === h.pid), 5000, 'finished process to leave the list')
})

test('background: commands.kill', async () => {
  const h = await sbx.commands.run('sleep 30', { background: true })
  assert.equal(await sbx.commands.kill(h.pid), true)
  await assert.rejects(h.wait(), (err) => {
    assert.ok(err instanceof CommandExitError, `got ${err?.constructor?.name}: ${err}`)
    assert.notEqual(err.exitCode, 0)
    return true
  })
  assert.equal(await sbx.commands.kill(999999), false)
  // Nothing is left to kill once it has ended.
  assert.equal(await sbx.commands.kill(h.pid), false)
})

test('background: handle.kill', async () => {
  const h = await sbx.commands.run('sleep 30', { background: true })
  assert.equal(await h.kill(), true)
  await assert.rejects(h.wait(), CommandExitError)
})

test('background: disconnect, then commands.connect', async () => {
  const first = []
  const h = await sbx.commands.run('for i in 1 2 3 4 5 6; do echo tick$i; sleep 0.3; done', {
    background: true,
    onStdout: (d) => first.push(d),
  })
  await waitFor(() => first.join('').includes('tick1'), 5000, 'first output')
  await h.disconnect()
  // Disconnecting does not kill the command.
  await sleep(200)
  assert.ok((await sbx.commands.list()).some((p) => p.pid === h.pid), 'process gone after disconnect')

  const second = []
  const h2 = await sbx.commands.connect(h.pid, { onStdout: (d) => second.push(d) })
  assert.equal(h2.pid, h.pid)
  const r = await h2.wait()
  assert.equal(r.exitCode, 0)
  assert.ok(second.join('').includes('tick6'), `after reconnect got ${JSON.stringify(second)}`)
  assert.ok(!first.join('').includes('tick6'), `disconnected handle still got ${JSON.stringify(first)}`)
})

test('commands.connect to an unknown pid fails', async () => {
  await assert.rejects(sbx.commands.connect(999999))
})

test('stdin: sendStdin and closeStdin', async () => {
  const h = await sbx.commands.run('cat', { background: true, stdin: true })
  await sbx.commands.sendStdin(h.pid, 'hello\n')
  await h.sendStdin(new TextEncoder().encode('world\n'))
  await sbx.commands.closeStdin(h.pid)
  const r = await h.wait()
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'hello\nworld\n')
})

test('stdin: a reading command gets lines as they are sent', async () => {
  const out = []
  const h = await sbx.commands.run('read a; echo "got $a"; read b; echo "got $b"', {
    background: true,
    stdin: true,
    onStdout: (d) => out.push(d),
  })
  await sbx.commands.sendStdin(h.pid, 'one\n')
  await waitFor(() => out.join('').includes('got one'), 5000, 'first echo')
  await sbx.commands.sendStdin(h.pid, 'two\n')
  const r = await h.wait()
  assert.equal(r.stdout, 'got one\ngot two\n')
})

test('sandbox.isRunning()', async () => {
  assert.equal(await sbx.isRunning(), true)
  if (throughServe) {
    assert.match(sbx.sandboxId, /^i[a-z0-9]{20}$/)
  } else {
    assert.equal(sbx.sandboxId, 'debug_sandbox_id')
  }
})

// Hundreds of command streams back to back over the SDK's keep-alive
// connections: none may be cut. (Through hutch serve, a proxy without full
// duplex lost about one stream in a hundred: net/http drained the unread
// request body when the response headers went out.)
test('run: 300 commands in a row, none cut', { skip: !throughServe && 'guards hutch serve\'s proxy' }, async () => {
  const sbx = await connect()
  try {
    for (let i = 0; i < 300; i++) {
      const r = await sbx.commands.run(`echo ${i}`)
      assert.equal(r.stdout, `${i}\n`)
    }
  } finally {
    await sbx.kill().catch(() => {})
  }
})
