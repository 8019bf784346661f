// Every tool of `hutch mcp` at least once, through the TypeScript SDK
// client, checking what each returns (see lib.mjs target for the command
// line):
//
//   MCP_API_KEY=KEY node tools.mjs http http://127.0.0.1:PORT/mcp
//
// Beyond scenario.mjs: sandbox lifetime tools, a port endpoint used for
// real, background commands, output and time bounds, and the file tools.
import assert from 'node:assert/strict'
import { setTimeout as sleep } from 'node:timers/promises'
import { TOOLS, log, target, connect, listTools, call, ok, okText, fails, run } from './lib.mjs'

// poll calls f every 100ms until it returns a truthy value or ms pass.
async function poll(what, ms, f) {
  const deadline = Date.now() + ms
  for (;;) {
    const v = await f()
    if (v) return v
    if (Date.now() > deadline) throw new Error(`timed out after ${ms}ms waiting for ${what}`)
    await sleep(100)
  }
}

run(async () => {
  const t = target()
  const client = await connect(t)
  await listTools(client) // caches output schemas: the client checks every structured result
  const used = new Set()
  const use = (name) => used.add(name)
  const tool = {
    ok: (name, args) => (use(name), ok(client, name, args)),
    okText: (name, args) => (use(name), okText(client, name, args)),
    fails: (name, args) => (use(name), fails(client, name, args)),
    call: (name, args) => (use(name), call(client, name, args)),
  }

  // sandbox_create refuses what it cannot do.
  assert.match(await tool.fails('sandbox_create', { template: 'no-such-template' }), /no-such-template|not found|template/i)
  assert.match(await tool.fails('sandbox_create', { timeout_seconds: 10 * 86400 }), /timeout_seconds/)

  // sandbox_create with envs, metadata and a timeout.
  const created = await tool.ok('sandbox_create', { timeout_seconds: 120, envs: { FOO: 'bar' }, metadata: { suite: 'mcp-tools' } })
  const id = created.sandbox_id
  assert.equal(created.state, 'running', JSON.stringify(created))
  assert.equal(created.metadata?.suite, 'mcp-tools', JSON.stringify(created))
  assert.ok(created.expires_in_seconds > 100 && created.expires_in_seconds <= 120, `expires_in_seconds: ${JSON.stringify(created)}`)
  log('sandbox_create', id)

  try {
    // Sandbox lifetime and state.
    const info = await tool.ok('sandbox_get_info', { sandbox_id: id })
    assert.equal(info.sandbox_id, id)
    assert.equal(info.template, 'base', JSON.stringify(info))
    assert.ok(info.cpus >= 1 && info.memory_mb > 0, JSON.stringify(info))
    const renewed = await tool.ok('sandbox_renew', { sandbox_id: id, timeout_seconds: 600 })
    assert.ok(renewed.expires_in_seconds > 590, `sandbox_renew: ${JSON.stringify(renewed)}`)
    assert.ok(Date.parse(renewed.end_at) > Date.parse(info.end_at), 'sandbox_renew did not move end_at')
    const connected = await tool.ok('sandbox_connect', { sandbox_id: id, timeout_seconds: 900 })
    assert.ok(connected.expires_in_seconds > 890, `sandbox_connect: ${JSON.stringify(connected)}`)
    assert.match(await tool.fails('sandbox_renew', { sandbox_id: id, timeout_seconds: 0 }), /timeout_seconds/)
    assert.deepEqual(await tool.ok('sandbox_healthcheck', { sandbox_id: id }), { running: true, sandbox_id: id, healthy: true })
    const metrics = await tool.ok('sandbox_get_metrics', { sandbox_id: id })
    assert.ok(Array.isArray(metrics.samples), JSON.stringify(metrics))
    log('sandbox_get_info/renew/connect/healthcheck/get_metrics')

    // Commands: envs of the sandbox, users, time and output bounds, bad input.
    assert.equal((await tool.ok('command_run', { sandbox_id: id, command: 'echo $FOO' })).stdout, 'bar\n')
    assert.equal((await tool.ok('command_run', { sandbox_id: id, command: 'id -un; pwd' })).stdout, 'user\n/home/user\n')
    assert.equal((await tool.ok('command_run', { sandbox_id: id, command: 'id -u', user: 'root' })).stdout, '0\n')
    const t0 = Date.now()
    const slow = await tool.ok('command_run', { sandbox_id: id, command: 'sleep 20', timeout_seconds: 1 })
    assert.ok(slow.timed_out === true && slow.exit_code === -1, `a command past its timeout: ${JSON.stringify(slow)}`)
    assert.ok(Date.now() - t0 < 10_000, `timeout_seconds 1 took ${Date.now() - t0}ms`)
    const big = await tool.ok('command_run', { sandbox_id: id, command: 'seq 1 200000' })
    assert.equal(big.truncated, true, 'seq 1 200000 was not truncated')
    assert.ok(big.stdout.startsWith('1\n2\n3\n') && big.stdout.endsWith('199999\n200000\n'), 'truncated output lost its start or end')
    assert.ok(big.stdout.length < 64 << 10, `truncated stdout is ${big.stdout.length} bytes`)
    await tool.fails('command_run', { sandbox_id: id }) // no command: input validation is a tool error
    await tool.fails('command_run', { sandbox_id: id, command: 42 })
    await tool.fails('command_run', { sandbox_id: id, command: 'true', timeout_seconds: 999999 })
    log('command_run: envs, user, timeout, truncation, invalid input')

    // Background commands.
    const job = await tool.ok('command_start', { sandbox_id: id, command: 'for i in 1 2 3; do echo tick $i; sleep 0.2; done; echo done >&2; exit 7' })
    assert.match(job.command_id, /\S/, JSON.stringify(job))
    assert.ok(job.pid > 0, JSON.stringify(job))
    const first = await tool.ok('command_output', { sandbox_id: id, command_id: job.command_id })
    assert.equal(first.running, true, `just started: ${JSON.stringify(first)}`)
    const ended = await poll('the background command to end', 10_000, async () => {
      const o = await tool.ok('command_output', { sandbox_id: id, command_id: job.command_id })
      return !o.running && o
    })
    assert.deepEqual([ended.exit_code, ended.stdout, ended.stderr], [7, 'tick 1\ntick 2\ntick 3\n', 'done\n'], JSON.stringify(ended))
    assert.match(await tool.fails('command_interrupt', { sandbox_id: id, command_id: job.command_id }), /ended/)
    await tool.fails('command_output', { sandbox_id: id, command_id: 'cmd_0000000000000000' })
    await tool.fails('command_output', { sandbox_id: id, command_id: '../../etc/passwd' })
    log('command_start/command_output: exit 7 and both streams')

    // A web server in the sandbox, reached through sandbox_get_endpoint.
    const web = await tool.ok('command_start', { sandbox_id: id, command: 'echo served > index.txt && exec python3 -m http.server 8080 --bind 127.0.0.1' })
    const ep = await tool.ok('sandbox_get_endpoint', { sandbox_id: id, port: 8080 })
    assert.ok(ep.url && new URL(ep.url).hostname.match(/^(127\.0\.0\.1|localhost|\[::1\])$/), `endpoint: ${JSON.stringify(ep)} (the test must stay on loopback)`)
    const body = await poll('the sandbox web server', 15_000, async () => {
      try {
        const res = await fetch(new URL('index.txt', ep.url), { headers: ep.headers ?? {} })
        return res.status === 200 && (await res.text())
      } catch {
        return false
      }
    })
    assert.equal(body, 'served\n')
    await tool.fails('sandbox_get_endpoint', { sandbox_id: id, port: 70000 })
    const sig = await tool.ok('command_interrupt', { sandbox_id: id, command_id: web.command_id })
    assert.equal(sig.signal, 'SIGTERM')
    const stopped = await poll('the web server to stop', 10_000, async () => {
      const o = await tool.ok('command_output', { sandbox_id: id, command_id: web.command_id })
      return !o.running && o
    })
    assert.notEqual(stopped.exit_code, 0, `interrupted server: ${JSON.stringify(stopped)}`)
    log('sandbox_get_endpoint: fetched', JSON.stringify(body), 'from', ep.url, '; command_interrupt:', JSON.stringify(stopped.exit_code))

    // Files and directories (relative paths are under /home/user).
    assert.equal((await tool.ok('file_create_directories', { sandbox_id: id, path: 'proj/src/pkg' })).created, true)
    assert.equal((await tool.ok('file_create_directories', { sandbox_id: id, path: 'proj/src/pkg' })).created, false)
    const w = await tool.ok('file_write', { sandbox_id: id, path: 'proj/src/a.py', content: 'x = 1\ny = x + 1\nprint(x, y)\n' })
    assert.deepEqual(w, { path: '/home/user/proj/src/a.py', bytes: 28, status: 'written' })
    await tool.ok('file_write', { sandbox_id: id, path: '/home/user/proj/src/pkg/b.py', content: 'pass\n' })
    await tool.ok('file_write', { sandbox_id: id, path: 'proj/README.md', content: '# proj\n' })
    const listed = await tool.ok('file_list', { sandbox_id: id, path: 'proj', depth: 3 })
    const entries = Object.fromEntries(listed.entries.map((e) => [e.path, e.type]))
    assert.deepEqual(entries, {
      '/home/user/proj/README.md': 'file', '/home/user/proj/src': 'dir', '/home/user/proj/src/a.py': 'file',
      '/home/user/proj/src/pkg': 'dir', '/home/user/proj/src/pkg/b.py': 'file',
    })
    assert.equal((await tool.ok('file_list', { sandbox_id: id, path: 'proj' })).entries.length, 2, 'file_list depth 1')
    await tool.fails('file_list', { sandbox_id: id, path: 'proj', depth: 9 })
    const py = await tool.ok('file_search', { sandbox_id: id, path: 'proj', pattern: '*.py' })
    assert.deepEqual(py.matches.sort(), ['/home/user/proj/src/a.py', '/home/user/proj/src/pkg/b.py'])
    const deep = await tool.ok('file_search', { sandbox_id: id, path: 'proj', pattern: 'src/**/b.py' })
    assert.deepEqual(deep.matches, ['/home/user/proj/src/pkg/b.py'])
    await tool.fails('file_search', { sandbox_id: id, path: 'proj', pattern: '[' })

    // Line ranges.
    assert.equal(await tool.okText('file_read', { sandbox_id: id, path: 'proj/src/a.py', offset: 2, limit: 1 }), 'y = x + 1\n')
    const range = await tool.ok('file_read', { sandbox_id: id, path: 'proj/src/a.py', offset: 2, limit: 1 })
    assert.deepEqual([range.start_line, range.end_line, range.total_lines], [2, 2, 3], JSON.stringify(range))

    // Replace every occurrence; edit needs exactly one.
    assert.equal((await tool.ok('file_replace_contents', { sandbox_id: id, path: 'proj/src/a.py', old_text: 'x', new_text: 'z' })).replacements, 3)
    assert.equal(await okText(client, 'file_read', { sandbox_id: id, path: 'proj/src/a.py' }), 'z = 1\ny = z + 1\nprint(z, y)\n')
    await tool.fails('file_replace_contents', { sandbox_id: id, path: 'proj/src/a.py', old_text: 'nowhere', new_text: 'q' })
    await tool.ok('file_edit', { sandbox_id: id, path: 'proj/src/a.py', old_text: 'print(z, y)', new_text: 'print(z + y)' })
    assert.equal((await tool.ok('command_run', { sandbox_id: id, command: 'python3 proj/src/a.py' })).stdout, '3\n')

    // Move (parents made), then the old path is gone.
    const moved = await tool.ok('file_move', { sandbox_id: id, source: 'proj/README.md', destination: 'proj/docs/README.md' })
    assert.equal(moved.path, '/home/user/proj/docs/README.md', JSON.stringify(moved))
    assert.equal(await okText(client, 'file_read', { sandbox_id: id, path: 'proj/docs/README.md' }), '# proj\n')
    assert.match(await fails(client, 'file_read', { sandbox_id: id, path: 'proj/README.md' }), /not found|no such/i)

    log('file tools: directories, list, search, ranges, replace, edit, move')

    // Deletion: files, then directories; each refuses the other kind.
    assert.match(await tool.fails('file_delete', { sandbox_id: id, path: 'proj/src' }), /directory/)
    assert.match(await tool.fails('file_delete_directories', { sandbox_id: id, path: 'proj/src/a.py' }), /not a directory/)
    assert.equal((await tool.ok('file_delete', { sandbox_id: id, path: 'proj/src/a.py' })).existed, true)
    await fails(client, 'file_read', { sandbox_id: id, path: 'proj/src/a.py' })
    assert.equal((await tool.ok('file_delete_directories', { sandbox_id: id, path: 'proj' })).existed, true)
    await fails(client, 'file_list', { sandbox_id: id, path: 'proj' })
    await tool.fails('file_delete_directories', { sandbox_id: id, path: '/' })
    assert.equal((await tool.ok('command_run', { sandbox_id: id, command: 'ls /home/user' })).stdout, 'index.txt\n')
    log('file_delete/file_delete_directories')

    // Binary content, base64 both ways (last: file_read returns it as an
    // embedded resource).
    const bytes = Buffer.from([0, 1, 2, 250, 251, 252, 255, 10])
    await tool.ok('file_write', { sandbox_id: id, path: 'blob.bin', content: bytes.toString('base64'), encoding: 'base64' })
    const bin = await call(client, 'file_read', { sandbox_id: id, path: 'blob.bin', encoding: 'base64' })
    assert.ok(!bin.isError, JSON.stringify(bin))
    assert.equal(bin.structuredContent?.encoding, 'base64', JSON.stringify(bin))
    const blob = bin.content.find((c) => c.type === 'resource')?.resource?.blob
    assert.equal(blob, bytes.toString('base64'), `file_read base64: ${JSON.stringify(bin)}`)
    await tool.fails('file_write', { sandbox_id: id, path: 'bad.bin', content: 'not base64!', encoding: 'base64' })
    log('file_write/file_read base64')

    // Keep, branch and come back: a snapshot to start from, a fork, a
    // pause of the files and a resume that boots it again with them.
    await tool.ok('file_write', { sandbox_id: id, path: 'branch.txt', content: 'before the branch' })
    const snap = await tool.ok('sandbox_snapshot', { sandbox_id: id })
    assert.ok(snap.snapshot_id && snap.names.length === 1, JSON.stringify(snap))
    const fromSnap = await tool.ok('sandbox_create', { template: snap.snapshot_id, timeout_seconds: 60 })
    assert.equal((await tool.okText('file_read', { sandbox_id: fromSnap.sandbox_id, path: 'branch.txt' })).includes('before the branch'), true)
    await tool.ok('sandbox_kill', { sandbox_id: fromSnap.sandbox_id })
    const forks = await tool.ok('sandbox_fork', { sandbox_id: id, count: 2, timeout_seconds: 60 })
    assert.equal(forks.sandboxes.length, 2, JSON.stringify(forks))
    for (const f of forks.sandboxes) await tool.ok('sandbox_kill', { sandbox_id: f })
    assert.match(await tool.fails('sandbox_fork', { sandbox_id: id, count: 101 }), /count/)
    assert.deepEqual(await tool.ok('sandbox_pause', { sandbox_id: id, keep_memory: false }), { paused: true })
    assert.deepEqual(await tool.ok('sandbox_pause', { sandbox_id: id }), { paused: false })
    const resumed = await tool.ok('sandbox_resume', { sandbox_id: id, timeout_seconds: 300 })
    assert.equal(resumed.state, 'running', JSON.stringify(resumed))
    assert.equal((await tool.okText('file_read', { sandbox_id: id, path: 'branch.txt' })).includes('before the branch'), true)
    log('sandbox_snapshot/fork/pause/resume')
  } finally {
    assert.deepEqual(await tool.ok('sandbox_kill', { sandbox_id: id }), { killed: true, status: 'killed' })
  }
  assert.match(await tool.fails('sandbox_kill', { sandbox_id: id }), /not found/)
  await tool.fails('sandbox_healthcheck', { sandbox_id: id })
  await tool.fails('sandbox_list', { state: ['exploded'] })
  use('sandbox_list')

  // An unknown tool is a protocol error (JSON-RPC -32602), per the spec.
  await assert.rejects(client.callTool({ name: 'no_such_tool', arguments: {} }), (err) => err?.code === -32602)

  const missed = TOOLS.filter((n) => !used.has(n))
  assert.deepEqual(missed, [], `tools not exercised: ${missed.join(', ')}`)
  await client.close()
  log('PASS: all', TOOLS.length, 'tools')
})
