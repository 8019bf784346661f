// The TypeScript SDK client's scenario against `hutch mcp`, over stdio or
// streamable HTTP (see lib.mjs target):
//
//   node scenario.mjs stdio -- /path/to/hutch mcp --transport stdio --api-url URL --api-key KEY
//   MCP_API_KEY=KEY node scenario.mjs http http://127.0.0.1:PORT/mcp
//
// It lists the tools, makes a sandbox, runs commands, writes, reads and
// edits a file, lists and kills the sandbox, and checks that tool failures
// are isError results, never protocol errors.
import assert from 'node:assert/strict'
import { TOOLS, READ_ONLY, MUTATING, log, target, connect, listTools, call, ok, okText, fails, text, sandboxIds, run } from './lib.mjs'

run(async () => {
  const t = target()
  const client = await connect(t)
  log('connected over', t.kind, 'to', JSON.stringify(client.getServerVersion()), t.kind === 'http' ? `(protocol ${client.transport.protocolVersion})` : '')

  // tools/list: every tool, described, with an input schema and annotations.
  const tools = await listTools(client)
  const byName = new Map(tools.map((tool) => [tool.name, tool]))
  assert.equal(byName.size, tools.length, 'duplicate tool names')
  for (const name of TOOLS) {
    const tool = byName.get(name)
    assert.ok(tool, `tool ${name} missing; have ${[...byName.keys()].join(', ')}`)
    assert.ok(typeof tool.description === 'string' && tool.description.length > 10, `${name}: no description`)
    assert.equal(tool.inputSchema?.type, 'object', `${name}: inputSchema ${JSON.stringify(tool.inputSchema)}`)
    assert.ok(tool.annotations && typeof tool.annotations === 'object', `${name}: no annotations`)
  }
  for (const name of READ_ONLY) {
    assert.equal(byName.get(name).annotations.readOnlyHint, true, `${name} only reads: want readOnlyHint true, got ${JSON.stringify(byName.get(name).annotations)}`)
  }
  for (const name of MUTATING) {
    assert.notEqual(byName.get(name).annotations.readOnlyHint, true, `${name} changes things but claims readOnlyHint`)
  }
  for (const name of ['sandbox_kill', 'file_delete', 'file_delete_directories']) {
    assert.equal(byName.get(name).annotations.destructiveHint, true, `${name} destroys: want destructiveHint true, got ${JSON.stringify(byName.get(name).annotations)}`)
  }
  assert.ok(byName.get('command_run').inputSchema.required?.includes('command'), 'command_run: command is not required')
  log(`tools/list: ${tools.length} tools`)

  // A sandbox.
  const created = await ok(client, 'sandbox_create', { timeout_seconds: 300, metadata: { suite: 'mcp-ts', transport: t.kind } })
  const id = created.sandbox_id
  assert.ok(typeof id === 'string' && id.length > 0, `sandbox_create: no sandbox_id in ${JSON.stringify(created)}`)
  log('sandbox_create:', id)

  try {
    // Commands.
    const r = await ok(client, 'command_run', { sandbox_id: id, command: "python3 -c 'print(6*7)'" })
    assert.equal(r.stdout, '42\n', `command_run stdout: ${JSON.stringify(r)}`)
    assert.equal(r.exit_code, 0, `command_run exit_code: ${JSON.stringify(r)}`)
    log('command_run python3:', JSON.stringify(r))

    // A failing command is a result (exit code and stderr), not a protocol
    // error; call() would have thrown on one.
    const failed = await call(client, 'command_run', { sandbox_id: id, command: 'echo oops >&2; exit 3' })
    const fr = failed.structuredContent
    if (fr !== undefined) {
      assert.equal(fr.exit_code, 3, `failing command: ${JSON.stringify(failed)}`)
      assert.equal(fr.stderr, 'oops\n', `failing command's stderr: ${JSON.stringify(failed)}`)
    } else {
      assert.match(text(failed), /\b3\b/, `failing command: no exit code in ${JSON.stringify(failed)}`)
    }
    log('command_run exit 3: isError', failed.isError ?? false, JSON.stringify(fr ?? text(failed)))

    // Concurrent calls on one connection (over HTTP: concurrent POSTs),
    // and a command's envs and cwd.
    const par = await Promise.all([1, 2, 3].map((i) => ok(client, 'command_run', { sandbox_id: id, command: `sleep 0.5; echo run-${i}` })))
    par.forEach((r, i) => assert.equal(r.stdout, `run-${i + 1}\n`, `concurrent command_run ${i + 1}: ${JSON.stringify(r)}`))
    const env = await ok(client, 'command_run', { sandbox_id: id, command: 'echo "$GREETING from $(pwd)"', envs: { GREETING: 'hello' }, cwd: '/tmp' })
    assert.equal(env.stdout, 'hello from /tmp\n', `command_run with envs and cwd: ${JSON.stringify(env)}`)
    log('command_run: 3 concurrent calls, envs and cwd')

    // Files: write and read back.
    const path = '/home/user/mcp-test/notes.txt'
    const body = 'first line\nsecond line: ünïcode ✓\n'
    await ok(client, 'file_write', { sandbox_id: id, path, content: body })
    assert.equal(await okText(client, 'file_read', { sandbox_id: id, path }), body, 'file_read')
    const described = await ok(client, 'file_read', { sandbox_id: id, path })
    assert.equal(described.size, Buffer.byteLength(body), `file_read structured content: ${JSON.stringify(described)}`)
    log('file_write/file_read round trip')

    // file_edit: exactly one occurrence.
    await ok(client, 'file_edit', { sandbox_id: id, path, old_text: 'second line', new_text: 'edited line' })
    assert.equal(await okText(client, 'file_read', { sandbox_id: id, path }), 'first line\nedited line: ünïcode ✓\n', 'file_read after file_edit')
    const none = await fails(client, 'file_edit', { sandbox_id: id, path, old_text: 'no such text', new_text: 'x' })
    assert.match(none, /not found|no occurrence|0 occurrences|does not (contain|occur)|found 0|zero/i, `file_edit of absent text: unclear message ${JSON.stringify(none)}`)
    const two = await fails(client, 'file_edit', { sandbox_id: id, path, old_text: 'line', new_text: 'row' })
    assert.match(two, /\b2\b|two|multiple|more than once|more than one|unique|ambiguous/i, `file_edit of repeated text: unclear message ${JSON.stringify(two)}`)
    assert.equal(await okText(client, 'file_read', { sandbox_id: id, path }), 'first line\nedited line: ünïcode ✓\n', 'a failed file_edit changed the file')
    log('file_edit: one occurrence edited; zero:', JSON.stringify(none), '; two:', JSON.stringify(two))

    // sandbox_list has it.
    const listed = sandboxIds(await ok(client, 'sandbox_list', {}))
    assert.ok(listed.includes(id), `sandbox_list ${JSON.stringify(listed)} lacks ${id}`)
    log('sandbox_list:', JSON.stringify(listed))
  } finally {
    await ok(client, 'sandbox_kill', { sandbox_id: id })
    log('sandbox_kill', id)
  }

  // The killed sandbox is gone: tool errors, and the session still works.
  const gone = await fails(client, 'command_run', { sandbox_id: id, command: 'true' })
  log('command_run on the killed sandbox:', JSON.stringify(gone))
  const info = await fails(client, 'sandbox_get_info', { sandbox_id: id })
  assert.match(info, /not found|no such|unknown|does not exist|killed/i, `sandbox_get_info of a killed sandbox: ${JSON.stringify(info)}`)
  const still = sandboxIds(await ok(client, 'sandbox_list', {}))
  assert.ok(!still.includes(id), `the killed sandbox is still listed: ${JSON.stringify(still)}`)

  await client.close()
  log('PASS')
})
