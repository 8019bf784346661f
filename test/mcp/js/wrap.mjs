// The TypeScript SDK client against `hutch mcp wrap`: a stdio MCP server
// whose real server runs in a fresh sandbox (run by test/mcp's
// wrap_test.go):
//
//   WRAP_API_URL=URL WRAP_API_KEY=KEY node wrap.mjs SCENARIO -- HUTCH mcp wrap [FLAGS] -- CMD...
//
// WRAP_API_URL and WRAP_API_KEY reach the hutch serve, to list the
// sandboxes wrap made (metadata hutch.mcp=wrap). Scenarios:
//
//   memory    CMD is mcp-server-memory: tools listed, state kept across
//             calls, the server's stderr reaches ours, one sandbox with
//             wrap's metadata during the session, none once the client
//             closed, and wrap exited 0 by itself (no SIGTERM).
//   hostfile  CMD is test/mcp's python server (read_file, get_env): a file
//             of this machine (HOST_FILE) cannot be read, the uploaded
//             one (INSIDE_PATH, with INSIDE_TEXT) can; this machine's
//             WRAP_SECRET is not in the server's environment, WRAP_PASSED
//             (passed with -e) is.
//   hold      connects, lists tools, prints "READY pid=<wrap's pid>" and
//             waits; when wrap exits it prints "EXIT code=N signal=S" and
//             exits 0 (for tests that kill the client or wrap).
import assert from 'node:assert/strict'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StdioClientTransport, getDefaultEnvironment } from '@modelcontextprotocol/sdk/client/stdio.js'
import { log, listTools, text, run } from './lib.mjs'

const [scenario, sep, ...cmd] = process.argv.slice(2)
assert.ok(scenario && sep === '--' && cmd.length > 0, 'usage: node wrap.mjs SCENARIO -- HUTCH mcp wrap ... -- CMD...')

// wrapSandboxes lists the sandboxes `hutch mcp wrap` made (metadata
// hutch.mcp=wrap), through the API.
async function wrapSandboxes() {
  const res = await fetch(`${process.env.WRAP_API_URL}/v2/sandboxes?limit=100`, { headers: { 'X-API-KEY': process.env.WRAP_API_KEY } })
  const body = await res.text()
  assert.equal(res.status, 200, `list sandboxes: ${res.status} ${body}`)
  return JSON.parse(body).filter((s) => s.metadata?.['hutch.mcp'] === 'wrap')
}

// start spawns wrap with the SDK's StdioClientTransport, its stderr piped
// (and copied to ours); env adds to the default environment.
async function start(env = {}) {
  const transport = new StdioClientTransport({ command: cmd[0], args: cmd.slice(1), env: { ...getDefaultEnvironment(), ...env }, stderr: 'pipe' })
  let stderr = ''
  transport.stderr.on('data', (b) => {
    stderr += b
    process.stderr.write(b)
  })
  const client = new Client({ name: 'hutch-wrap-test', version: '1.0.0' })
  const t0 = Date.now()
  await client.connect(transport)
  // How wrap exits (a private field of the transport: the child process).
  const exited = new Promise((resolve) => transport._process.once('exit', (code, signal) => resolve({ code, signal })))
  log(`connected to ${JSON.stringify(client.getServerVersion())} through hutch mcp wrap (pid ${transport.pid}) in ${Date.now() - t0} ms`)
  return { client, transport, exited, stderr: () => stderr }
}

// waitFor polls cond (async) until it holds or ms pass.
async function waitFor(what, ms, cond) {
  const deadline = Date.now() + ms
  for (;;) {
    if (await cond()) return
    assert.ok(Date.now() < deadline, `${what}: not within ${ms} ms`)
    await new Promise((r) => setTimeout(r, 100))
  }
}

async function memory() {
  assert.deepEqual(await wrapSandboxes(), [], 'wrap sandboxes before the session')
  const s = await start()
  const tools = (await listTools(s.client)).map((t) => t.name)
  for (const want of ['create_entities', 'create_relations', 'add_observations', 'read_graph', 'search_nodes', 'open_nodes', 'delete_entities']) {
    assert.ok(tools.includes(want), `tools/list lacks ${want}: ${tools.join(', ')}`)
  }
  log('tools/list:', tools.join(', '))

  // State lives in the one server process for the whole session.
  const name = `wrap-test-${process.pid}-${Date.now()}`
  const created = await s.client.callTool({ name: 'create_entities', arguments: { entities: [{ name, entityType: 'test', observations: ['made through hutch mcp wrap'] }] } })
  assert.ok(!created.isError, `create_entities: ${JSON.stringify(created)}`)
  await s.client.callTool({ name: 'add_observations', arguments: { observations: [{ entityName: name, contents: ['second call'] }] } })
  for (let i = 0; i < 3; i++) {
    const graph = await s.client.callTool({ name: 'read_graph', arguments: {} })
    const g = graph.structuredContent ?? JSON.parse(text(graph))
    const e = g.entities.find((x) => x.name === name)
    assert.ok(e, `read_graph ${i + 1} lacks ${name}: ${JSON.stringify(g)}`)
    assert.deepEqual(e.observations, ['made through hutch mcp wrap', 'second call'], `read_graph ${i + 1}: ${JSON.stringify(e)}`)
  }
  const found = await s.client.callTool({ name: 'search_nodes', arguments: { query: name } })
  assert.match(text(found), new RegExp(name), `search_nodes: ${JSON.stringify(found)}`)
  log('create_entities, add_observations, then read_graph ×3 and search_nodes: state kept')

  // Concurrent requests on the one stream come back, each to its caller.
  const many = await Promise.all([...Array(8).keys()].map((i) => s.client.callTool({ name: 'search_nodes', arguments: { query: i % 2 ? name : 'nothing-matches-this' } })))
  many.forEach((r, i) => assert.equal(text(r).includes(name), i % 2 === 1, `concurrent search_nodes ${i}: ${text(r)}`))

  // The server's stderr reached the client's stderr.
  await waitFor('the server\'s stderr', 5000, () => s.stderr().includes('Knowledge Graph MCP Server running on stdio'))
  log('the server\'s stderr reached the client')

  // One sandbox, with wrap's metadata.
  const during = await wrapSandboxes()
  assert.equal(during.length, 1, `wrap sandboxes during the session: ${JSON.stringify(during)}`)
  assert.match(during[0].metadata['hutch.mcp.command'], /mcp-server-memory/, `metadata: ${JSON.stringify(during[0].metadata)}`)
  log('sandbox', during[0].sandboxID, JSON.stringify(during[0].metadata))

  // Closing the client (end of wrap's stdin) ends wrap by itself, 0, and
  // the sandbox with it.
  const t0 = Date.now()
  await s.client.close()
  const how = await s.exited
  log(`client closed; wrap exited ${JSON.stringify(how)} after ${Date.now() - t0} ms`)
  assert.deepEqual(how, { code: 0, signal: null }, `wrap's exit after the client closed; stderr:\n${s.stderr()}`)
  assert.ok(Date.now() - t0 < 2000, 'wrap took 2 s or more to exit: the SDK then sends SIGTERM')
  await waitFor('sandbox killed after the client closed', 5000, async () => (await wrapSandboxes()).length === 0)
  log(`no wrap sandbox ${Date.now() - t0} ms after the close`)
}

async function hostfile() {
  const s = await start({ WRAP_SECRET: 'host-only-secret', WRAP_PASSED: 'passed-with-e' })
  const tools = (await listTools(s.client)).map((t) => t.name)
  assert.deepEqual(tools.sort(), ['get_env', 'read_file'], `tools/list: ${tools}`)

  // This machine's file exists here but not for the server.
  const host = await s.client.callTool({ name: 'read_file', arguments: { path: process.env.HOST_FILE } })
  assert.equal(host.isError, true, `read_file of this machine's ${process.env.HOST_FILE} succeeded: ${JSON.stringify(host)}`)
  assert.match(text(host), /FileNotFoundError|No such file/, `read_file of this machine's file: ${text(host)}`)
  assert.ok(!text(host).includes(process.env.HOST_TEXT), 'the host file\'s content leaked')
  log('read_file of this machine\'s file:', text(host))

  // The uploaded file is there, so the tool works.
  const inside = await s.client.callTool({ name: 'read_file', arguments: { path: process.env.INSIDE_PATH } })
  assert.ok(!inside.isError, `read_file of the uploaded file: ${JSON.stringify(inside)}`)
  assert.equal(text(inside), process.env.INSIDE_TEXT)
  log('read_file of the uploaded', process.env.INSIDE_PATH, ':', JSON.stringify(text(inside)))

  // The environment: only what -e passed.
  const secret = await s.client.callTool({ name: 'get_env', arguments: { name: 'WRAP_SECRET' } })
  assert.equal(text(secret), '<unset>', `WRAP_SECRET of this machine reached the server: ${text(secret)}`)
  const passed = await s.client.callTool({ name: 'get_env', arguments: { name: 'WRAP_PASSED' } })
  assert.equal(text(passed), 'passed-with-e', '-e WRAP_PASSED')
  const home = await s.client.callTool({ name: 'get_env', arguments: { name: 'HOME' } })
  log('environment: WRAP_SECRET', text(secret), '; WRAP_PASSED', text(passed), '; HOME', text(home))

  await waitFor('the server\'s stderr', 5000, () => s.stderr().includes('py-mcp: serving on stdio'))
  await s.client.close()
  const how = await s.exited
  assert.deepEqual(how, { code: 0, signal: null }, `wrap's exit after the client closed; stderr:\n${s.stderr()}`)
  await waitFor('sandbox killed after the client closed', 5000, async () => (await wrapSandboxes()).length === 0)
}

async function hold() {
  const s = await start()
  const tools = await listTools(s.client)
  assert.ok(tools.length > 0, 'no tools')
  s.exited.then((how) => {
    console.log(`EXIT code=${how.code} signal=${how.signal}`)
    process.exit(0)
  })
  console.log(`READY pid=${s.transport.pid}`)
  await new Promise(() => {})
}

run(async () => {
  switch (scenario) {
    case 'memory':
      return memory()
    case 'hostfile':
      return hostfile()
    case 'hold':
      return hold()
  }
  throw new Error(`unknown scenario ${scenario}`)
})
