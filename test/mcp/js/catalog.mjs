// Catalog servers run from their images (TestCatalogImages): the official
// E2B JS SDK creates a sandbox whose mcp option names catalog servers that
// Hutch runs from their images (pulled through --mcp-registry-mirror from
// a registry on loopback, where the test put images of the reference
// server-everything under the catalog's names); the official TypeScript
// MCP client lists and calls their prefixed tools through Hutch's routing.
// Usage: node catalog.mjs E2B_JS_DIR (with E2B_API_URL, E2B_SANDBOX_URL,
// E2B_API_KEY pointing at hutch serve).
import assert from 'node:assert/strict'
import path from 'node:path'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'

const e2bDir = process.argv[2]
const { Sandbox } = await import(path.join(e2bDir, 'node_modules', 'e2b', 'dist', 'index.mjs'))
const base = process.env.E2B_SANDBOX_URL
const text = (r) => r.content.filter((c) => c.type === 'text').map((c) => c.text).join('')

// Timings, printed for the record (docs/mcp-gateway.md), never judged.
const timed = async (label, mcp) => {
  const t0 = performance.now()
  const s = await Sandbox.create({ timeoutMs: 60_000, mcp })
  const ms = performance.now() - t0
  await s.kill()
  console.log(`create with mcp ${label}: ${ms.toFixed(0)} ms`)
}
const t0 = performance.now()
const sbx = await Sandbox.create({
  timeoutMs: 300_000,
  mcp: {
    airtable: { airtableApiKey: 'pat-airtable-secret', nodeenv: 'production' },
    tavily: { apiKey: 'tvly-secret' },
    memory: {},
    // Its image exits at once with the catalog's arguments (--tools=all).
    stripe: { secretKey: 'sk_test_stripe' },
  },
})
console.log(`create with mcp {airtable, tavily, memory, stripe}, images pulled: ${(performance.now() - t0).toFixed(0)} ms`)
try {
  const token = await sbx.getMcpToken()
  const client = new Client({ name: 'catalog-test', version: '1.0.0' })
  await client.connect(new StreamableHTTPClientTransport(new URL(base + '/mcp'), {
    requestInit: { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '50005', Authorization: `Bearer ${token}` } },
  }))
  const names = (await client.listTools()).tools.map((t) => t.name)
  for (const want of ['airtable__echo', 'airtable__get-env', 'tavily__echo', 'tavily__get-env', 'memory__read_graph']) {
    assert.ok(names.includes(want), `tools/list lacks ${want}: ${names.join(', ')}`)
  }
  const echo = text(await client.callTool({ name: 'airtable__echo', arguments: { message: 'through the image' } }))
  assert.ok(echo.includes('through the image'), `airtable__echo: ${echo}`)

  // Each server has its own configuration and the image's environment,
  // and nothing of the other's.
  const airtable = text(await client.callTool({ name: 'airtable__get-env', arguments: {} }))
  const tavily = text(await client.callTool({ name: 'tavily__get-env', arguments: {} }))
  assert.ok(airtable.includes('pat-airtable-secret') && airtable.includes('"NODE_ENV": "production"'), `airtable's env: ${airtable}`)
  assert.ok(airtable.includes('FROM_IMAGE'), `airtable's env lacks the image's: ${airtable}`)
  assert.ok(!airtable.includes('tvly-secret'), `airtable sees tavily's key: ${airtable}`)
  assert.ok(tavily.includes('tvly-secret') && !tavily.includes('pat-airtable-secret'), `tavily's env: ${tavily}`)
  assert.ok(!airtable.includes(token) && !tavily.includes(token), 'a server sees the gateway token')

  // A server cannot read another's environment through /proc: each runs
  // as a user of its own, in its own image's root.
  const r = await sbx.commands.run('ps -eo uid,args | grep -E "node /app/dist/index.js" | grep -v grep', { user: 'root' })
  const uids = new Set(r.stdout.trim().split('\n').map((l) => l.trim().split(/\s+/)[0]))
  assert.equal(uids.size, 2, `the image servers' uids: ${r.stdout}`)
  assert.ok(![...uids].includes('0'), `an image server runs as root: ${r.stdout}`)

  // In an image's root, /proc shows a program only its own uid's
  // processes: not the gateway's launcher, whose command line held every
  // server's configuration, nor another server (review 31, F1).
  const peek = `const fs = require('fs')
const ids = fs.readdirSync('/proc').filter((x) => /^[0-9]+$/.test(x))
let seen = ''
for (const p of ids) { try { seen += fs.readFileSync('/proc/' + p + '/cmdline', 'utf8') } catch {} }
console.log(JSON.stringify({ ids: ids.length, secrets: seen.includes('tvly-secret') || seen.includes('pat-airtable-secret') }))`
  await sbx.files.write('/opt/mcp/images/tavily/tmp/peek.js', peek, { user: 'root' })
  const seen = await sbx.commands.run('chroot --userspec=61099:61099 /opt/mcp/images/tavily /usr/bin/node /tmp/peek.js', { user: 'root' })
  const view = JSON.parse(seen.stdout)
  assert.equal(view.ids, 1, `a program in the image's root sees other processes: ${seen.stdout}`)
  assert.equal(view.secrets, false)

  // The server that exited at start: reported, its calls tool errors.
  const health = await fetch(base + '/health', { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '50005', Authorization: `Bearer ${token}` } })
  assert.equal(health.status, 200)
  const servers = Object.fromEntries((await health.json()).servers.map((s) => [s.name, s]))
  assert.ok(servers.airtable.running && servers.tavily.running, JSON.stringify(servers))
  assert.ok(!servers.stripe.running && servers.stripe.lastError.includes('--tools=all'), `stripe: ${JSON.stringify(servers.stripe)}`)
  const down = await client.callTool({ name: 'stripe__create_customer', arguments: {} })
  assert.ok(down.isError && text(down).includes('has not started'), `stripe__create_customer: ${JSON.stringify(down)}`)
  await client.close()

  // The gateway's port is root's for good: a process of another uid (an
  // image's daemon that OOM-killed the gateway, review 31 rounds 3 and 4)
  // cannot take it, the gateway's supervisor holds it and starts the
  // gateway again; and should even the supervisor go, the edge forwards
  // only to a listener the sandbox's root owns.
  const squatter = `node -e "require('http').createServer((q, s) => s.end('squatter')).listen(50005)"`
  const edgeHealth = async () => {
    const r = await fetch(base + '/health', { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '50005', Authorization: `Bearer ${token}` } })
    return { status: r.status, body: await r.text() }
  }
  await sbx.commands.run('pkill -KILL -f "gateway --serve"', { user: 'root' })
  await sbx.commands.run(squatter, { user: 'user', background: true })
  let back
  for (let i = 0; i < 150 && !back; i++) {
    const h = await edgeHealth()
    assert.ok(!h.body.includes('squatter'), `the squatter answered through the edge: ${h.body}`)
    if (h.status === 200) back = true
    else await new Promise((res) => setTimeout(res, 100))
  }
  assert.ok(back, 'the gateway was not started again')
  const inside = await sbx.commands.run(`curl -s -H "Authorization: Bearer ${token}" http://127.0.0.1:50005/health`, { user: 'user' })
  assert.ok(inside.stdout.includes('"servers"') && !inside.stdout.includes('squatter'), `inside the sandbox: ${inside.stdout}`)

  await sbx.commands.run('pkill -KILL -f "gateway --s"', { user: 'root' })
  await sbx.commands.run(squatter, { user: 'user', background: true })
  let squat
  for (let i = 0; i < 50 && !squat; i++) {
    const r = await sbx.commands.run('curl -s http://127.0.0.1:50005/ || true', { user: 'user' })
    if (r.stdout === 'squatter') squat = true
    else await new Promise((res) => setTimeout(res, 100))
  }
  assert.ok(squat, 'the squatter did not take the port once the gateway and its supervisor were gone')
  const after = await edgeHealth()
  assert.equal(after.status, 502, `through the edge to the squatter: ${after.status} ${after.body}`)
  assert.ok(!after.body.includes('squatter'), after.body)
} finally {
  await sbx.kill()
}

await timed('{memory} (preinstalled package)', { memory: {} })
await timed('{tavily} (image, imported before)', { tavily: { apiKey: 'k' } })

// Bad configurations fail the create, in the SDK's words.
const refused = async (mcp, want) => {
  await assert.rejects(Sandbox.create({ timeoutMs: 60_000, mcp }), (e) => {
    assert.match(String(e.message), /Failed to start MCP gateway/, String(e))
    for (const w of want) assert.ok(String(e.message).includes(w), `${e.message} lacks ${w}`)
    return true
  })
}
await refused({ airtable: { airtableApiKey: 'k' } }, ['"nodeenv"', 'airtable'])
await refused({ notACatalogServer: {} }, ['notACatalogServer', 'catalog'])
// In the catalog, but the mirror has no image of it.
await refused({ wikipedia: {} }, ['wikipedia', 'could not be pulled'])
console.log('catalog servers ran from their images')
