// The E2B MCP quick start against Hutch: the official E2B JS SDK creates a
// sandbox with the `mcp` option (template mcp-gateway, `mcp-gateway
// --config` run by the SDK), then the official TypeScript MCP client
// connects to the gateway with the bearer token through Hutch's routing.
// Usage: node gateway.mjs E2B_JS_DIR  (with E2B_API_URL, E2B_SANDBOX_URL,
// E2B_API_KEY pointing at hutch serve).
import assert from 'node:assert/strict'
import path from 'node:path'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'

const e2bDir = process.argv[2]
const { Sandbox } = await import(path.join(e2bDir, 'node_modules', 'e2b', 'dist', 'index.mjs'))
const base = process.env.E2B_SANDBOX_URL

const sbx = await Sandbox.create({
  timeoutMs: 300_000,
  mcp: {
    memory: {},
    everything: {},
    filesystem: { paths: ['/home/user'] },
    // A plain command server with a secret: only it may see it.
    leaky: { command: 'mcp-server-everything', args: ['stdio'], env: { LEAKY_SECRET: 'only-for-leaky' }, allowTools: ['get-env', 'echo'] },
  },
})
try {
  const token = await sbx.getMcpToken()
  assert.ok(token && token.length >= 16, 'the SDK read no token from /etc/mcp-gateway/.token')
  assert.match(sbx.getMcpUrl(), new RegExp(`^https://50005-${sbx.sandboxId}\\.`))

  // Hutch's routing by headers on the sandbox URL (the host getMcpUrl()
  // names needs TLS and DNS this test has not got).
  const connect = async (tok) => {
    const headers = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '50005' }
    if (tok !== undefined) headers.Authorization = `Bearer ${tok}`
    const client = new Client({ name: 'gateway-test', version: '1.0.0' })
    await client.connect(new StreamableHTTPClientTransport(new URL(base + '/mcp'), { requestInit: { headers } }))
    return client
  }
  for (const bad of [undefined, 'wrong-token']) {
    await assert.rejects(connect(bad), (e) => e.code === 401 || String(e).includes('401'), `token ${bad}: not refused with 401`)
  }

  const a = await connect(token)
  const b = await connect(token)
  const names = (await a.listTools()).tools.map((t) => t.name)
  for (const want of ['memory__create_entities', 'memory__read_graph', 'everything__echo', 'filesystem__read_text_file', 'leaky__get-env', 'leaky__echo']) {
    assert.ok(names.includes(want), `tools/list lacks ${want}: ${names.join(', ')}`)
  }
  assert.ok(!names.includes('leaky__add'), 'allowTools did not hide leaky__add')
  const text = (r) => r.content.filter((c) => c.type === 'text').map((c) => c.text).join('')

  // State lives in one server process across calls and clients.
  await a.callTool({ name: 'memory__create_entities', arguments: { entities: [{ name: 'hutch', entityType: 'project', observations: ['runs sandboxes'] }] } })
  await b.callTool({ name: 'memory__add_observations', arguments: { observations: [{ entityName: 'hutch', contents: ['speaks MCP'] }] } })
  const graph = text(await a.callTool({ name: 'memory__read_graph', arguments: {} }))
  assert.ok(graph.includes('runs sandboxes') && graph.includes('speaks MCP'), `read_graph lost state: ${graph}`)

  // Two clients at once.
  const echoes = await Promise.all([a, b, a, b].map((c, i) => c.callTool({ name: 'everything__echo', arguments: { message: `m${i}` } })))
  echoes.forEach((r, i) => assert.ok(text(r).includes(`m${i}`), `echo ${i}: ${text(r)}`))

  // Files through server-filesystem, under the workspace root.
  await sbx.files.write('/home/user/note.txt', 'written by the E2B SDK')
  const read = await a.callTool({ name: 'filesystem__read_text_file', arguments: { path: '/home/user/note.txt' } })
  assert.ok(text(read).includes('written by the E2B SDK'), `filesystem read: ${text(read)}`)

  // Secrets reach their own server only.
  const leakyEnv = text(await a.callTool({ name: 'leaky__get-env', arguments: {} }))
  assert.ok(leakyEnv.includes('only-for-leaky'), 'leaky does not see its own secret')
  const everythingEnv = text(await a.callTool({ name: 'everything__get-env', arguments: {} }))
  assert.ok(!everythingEnv.includes('only-for-leaky'), 'everything sees leaky\'s secret')
  assert.ok(!everythingEnv.includes(token), 'a server sees the gateway token')

  await a.close()
  await b.close()

  // The audit trail (GET /events): the gateway's start with its
  // configuration's values redacted, and each tool call through it.
  const res = await fetch(`${process.env.E2B_API_URL}/events?limit=1000&sandboxID=${sbx.sandboxId}`, { headers: { 'X-API-Key': process.env.E2B_API_KEY } })
  assert.equal(res.status, 200, `GET /events: ${res.status}`)
  const body = await res.text()
  const events = JSON.parse(body)
  assert.ok(!body.includes('only-for-leaky'), 'the trail holds a gateway server\'s secret')
  assert.ok(!body.includes(token), 'the trail holds the gateway token')
  const launch = events.find((e) => e.action === 'command.start' && String(e.detail.cmd).includes('mcp-gateway'))
  assert.ok(launch, `no command.start of the gateway in ${body}`)
  assert.ok(String(launch.detail.cmd).includes('[redacted]') && String(launch.detail.cmd).includes('leaky'), `the gateway's command line: ${launch.detail.cmd}`)
  const calls = events.filter((e) => e.kind === 'mcp' && e.action === 'tool.call' && e.detail.via === 'gateway')
  const called = calls.map((e) => e.detail.tool)
  for (const want of ['memory__create_entities', 'memory__add_observations', 'memory__read_graph', 'everything__echo', 'filesystem__read_text_file', 'leaky__get-env']) {
    assert.ok(called.includes(want), `no tool.call of ${want} in the trail: ${called.join(', ')}`)
  }
  assert.equal(called.filter((n) => n === 'everything__echo').length, 4, 'four echoes, four tool.call events')
  const echo = calls.find((e) => e.detail.tool === 'everything__echo')
  assert.ok(/^m[0-3]$/.test(echo.detail.arguments.message) && echo.keyID && echo.outcome === 'ok', `an echo's event: ${JSON.stringify(echo)}`)
  console.log(`gateway ok: ${names.length} tools, ${calls.length} tool calls in the trail`)
} finally {
  await sbx.kill()
}

// A config the gateway refuses makes the SDK fail the create, with the
// reason, and kill the sandbox.
await assert.rejects(Sandbox.create({ mcp: { notion: {} } }), (e) => String(e).includes('Failed to start MCP gateway') && String(e).includes('internalIntegrationToken'))
console.log('bad config refused')
