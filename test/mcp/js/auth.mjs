// `hutch mcp --transport http` authentication and per-key scoping:
//
//   KEY_A=e2b_… KEY_B=e2b_… KEY_REVOKED=e2b_… node auth.mjs http://127.0.0.1:PORT/mcp
//
// Requests without a valid `Authorization: Bearer <API key>` get 401; a
// sandbox made with key A is invisible to key B, which cannot kill it.
import assert from 'node:assert/strict'
import { log, connect, ok, fails, sandboxIds, run } from './lib.mjs'

const initialize = JSON.stringify({
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'hutch-auth-test', version: '1.0.0' } },
})

// post sends an initialize with the headers given and returns the response.
async function post(url, headers = {}) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', ...headers },
    body: initialize,
  })
  const body = await res.text()
  return { status: res.status, body, wwwAuthenticate: res.headers.get('www-authenticate') }
}

run(async () => {
  const url = process.argv[2]
  const keyA = process.env.KEY_A
  const keyB = process.env.KEY_B
  const revoked = process.env.KEY_REVOKED
  assert.ok(url && keyA && keyB && revoked && keyA !== keyB, 'usage: KEY_A=… KEY_B=… KEY_REVOKED=… node auth.mjs URL')

  // Raw HTTP: nothing but a valid key gets in.
  const wrongKey = 'e2b_' + 'f'.repeat(40)
  const cases = [
    ['no Authorization', {}],
    ['a wrong key', { Authorization: `Bearer ${wrongKey}` }],
    ['a revoked key', { Authorization: `Bearer ${revoked}` }],
    ['an empty bearer', { Authorization: 'Bearer ' }],
    ['a non-bearer scheme', { Authorization: `Basic ${Buffer.from(`user:${keyA}`).toString('base64')}` }],
    ['the key without a scheme', { Authorization: keyA }],
    ['the key as X-API-Key', { 'X-API-Key': keyA }],
  ]
  for (const [what, headers] of cases) {
    const r = await post(url, headers)
    assert.equal(r.status, 401, `${what}: want 401, got ${r.status} ${r.body}`)
    assert.ok(!r.body.includes(keyA) && !r.body.includes(revoked), `${what}: the 401 echoes the key`)
    log(`${what}: 401`, r.wwwAuthenticate ? `WWW-Authenticate: ${r.wwwAuthenticate}` : '(no WWW-Authenticate)', JSON.stringify(r.body.slice(0, 200)))
  }
  const good = await post(url, { Authorization: `Bearer ${keyA}` })
  assert.equal(good.status, 200, `a valid key: want 200, got ${good.status} ${good.body}`)

  // A browser page elsewhere cannot use a key it got hold of (the spec's
  // MUST on Origin): 403, as for a rebound Host.
  const cross = await post(url, { Authorization: `Bearer ${keyA}`, Origin: 'http://evil.example' })
  assert.equal(cross.status, 403, `a cross-origin request: want 403, got ${cross.status} ${cross.body}`)
  const sameOrigin = await post(url, { Authorization: `Bearer ${keyA}`, Origin: new URL(url).origin })
  assert.equal(sameOrigin.status, 200, `a same-origin request: want 200, got ${sameOrigin.status} ${sameOrigin.body}`)
  log('Origin http://evil.example: 403; same origin: 200')

  // The SDK client: a wrong key fails to connect with the 401.
  const t = { kind: 'http', url }
  await assert.rejects(connect(t, { key: wrongKey }), (err) => {
    log('SDK client with a wrong key:', String(err))
    return /401/.test(String(err)) || err?.code === 401
  })
  await assert.rejects(connect(t, { key: undefined }), (err) => /401/.test(String(err)) || err?.code === 401)

  // Two keys, two tenants.
  const a = await connect(t, { key: keyA, name: 'tenant-a' })
  const b = await connect(t, { key: keyB, name: 'tenant-b' })
  const sa = (await ok(a, 'sandbox_create', { timeout_seconds: 300, metadata: { tenant: 'a' } })).sandbox_id
  const sb = (await ok(b, 'sandbox_create', { timeout_seconds: 300, metadata: { tenant: 'b' } })).sandbox_id
  log('key A made', sa, '; key B made', sb)
  try {
    const listA = sandboxIds(await ok(a, 'sandbox_list', {}))
    const listB = sandboxIds(await ok(b, 'sandbox_list', {}))
    assert.ok(listA.includes(sa) && !listA.includes(sb), `key A lists ${JSON.stringify(listA)}`)
    assert.ok(listB.includes(sb) && !listB.includes(sa), `key B lists ${JSON.stringify(listB)}`)
    const byMeta = sandboxIds(await ok(b, 'sandbox_list', { metadata: { tenant: 'a' } }))
    assert.deepEqual(byMeta, [], `key B finds key A's sandbox by its metadata: ${JSON.stringify(byMeta)}`)

    // Key B cannot touch key A's sandbox: each is a not-found tool error.
    const killed = await fails(b, 'sandbox_kill', { sandbox_id: sa })
    assert.match(killed, /not found/i, `key B's sandbox_kill of key A's sandbox: ${JSON.stringify(killed)}`)
    log("key B's sandbox_kill of A's sandbox:", JSON.stringify(killed))
    await fails(b, 'sandbox_get_info', { sandbox_id: sa })
    await fails(b, 'command_run', { sandbox_id: sa, command: 'echo leaked' })
    await fails(b, 'file_read', { sandbox_id: sa, path: '/etc/hostname' })
    await fails(b, 'file_write', { sandbox_id: sa, path: '/tmp/x', content: 'x' })
    await fails(b, 'sandbox_renew', { sandbox_id: sa, timeout_seconds: 60 })
    await fails(a, 'sandbox_kill', { sandbox_id: sb })

    // Both still run.
    const r = await ok(a, 'command_run', { sandbox_id: sa, command: 'echo alive' })
    assert.equal(r.stdout, 'alive\n', `key A's sandbox after B's attempts: ${JSON.stringify(r)}`)
    const info = await ok(b, 'sandbox_get_info', { sandbox_id: sb })
    assert.equal(info.sandbox_id ?? info.sandboxId, sb, `sandbox_get_info: ${JSON.stringify(info)}`)
  } finally {
    await ok(a, 'sandbox_kill', { sandbox_id: sa })
    await ok(b, 'sandbox_kill', { sandbox_id: sb })
  }
  await a.close()
  await b.close()
  log('PASS')
})
