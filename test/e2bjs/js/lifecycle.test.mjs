// Sandbox lifecycle through the control plane (`hutch serve`): create with
// metadata and envs, getInfo, list filters, timeouts, connect, kill, error
// mapping and signed file URLs. Skipped in debug mode, which has no control
// plane.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, SandboxNotFoundError, AuthenticationError, Template } from 'e2b'
import { throughServe, unique, waitFor, withRuntime } from './helpers.mjs'

const opts = { skip: !throughServe && 'needs hutch serve (E2B_API_KEY)' }

test('create, getInfo, list by metadata, connect, kill', opts, async () => {
  const tag = unique('suite')
  const sbx = await Sandbox.create({ metadata: { suite: tag, 'k y': 'v&=1' }, envs: { GREETING: 'hi' }, timeoutMs: 120_000 })
  assert.match(sbx.sandboxId, /^i[a-z0-9]{20}$/)
  const r = await sbx.commands.run('echo "$GREETING"')
  assert.equal(r.stdout, 'hi\n')

  const info = await sbx.getInfo()
  assert.equal(info.sandboxId, sbx.sandboxId)
  assert.equal(info.templateId, 'base')
  assert.equal(info.state, 'running')
  assert.deepEqual(info.metadata, withRuntime({ suite: tag, 'k y': 'v&=1' }))
  assert.ok(info.endAt > info.startedAt)

  const page = await Sandbox.list({ query: { metadata: { suite: tag, 'k y': 'v&=1' } } }).nextItems()
  assert.deepEqual(page.map((s) => s.sandboxId), [sbx.sandboxId])
  const none = await Sandbox.list({ query: { metadata: { suite: tag, 'k y': 'other' } } }).nextItems()
  assert.equal(none.length, 0)

  // setTimeout may shorten; connect only extends.
  await sbx.setTimeout(60_000)
  const shorter = (await sbx.getInfo()).endAt
  assert.ok(shorter < info.endAt, 'setTimeout did not shorten the life')
  const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 30_000 })
  assert.equal((await again.commands.run('echo connected')).stdout, 'connected\n')
  assert.equal((await sbx.getInfo()).endAt.getTime(), shorter.getTime(), 'connect shortened the life')

  assert.equal(await sbx.kill(), true)
  assert.equal(await Sandbox.kill(sbx.sandboxId), false)
  assert.equal(await sbx.isRunning(), false)
  await assert.rejects(sbx.getInfo(), SandboxNotFoundError)
})

test('pagination walks every sandbox once', opts, async () => {
  const tag = unique('page')
  const made = []
  for (let i = 0; i < 3; i++) made.push(await Sandbox.create({ metadata: { page: tag }, timeoutMs: 120_000 }))
  try {
    const seen = []
    const p = Sandbox.list({ query: { metadata: { page: tag } }, limit: 2 })
    while (p.hasNext) seen.push(...(await p.nextItems()).map((s) => s.sandboxId))
    assert.deepEqual(seen.sort(), made.map((s) => s.sandboxId).sort())
  } finally {
    await Promise.all(made.map((s) => s.kill()))
  }
})

test('an expired sandbox is gone', opts, async () => {
  const sbx = await Sandbox.create({ timeoutMs: 1_000 })
  const deadline = Date.now() + 20_000
  while (Date.now() < deadline && (await sbx.isRunning())) await new Promise((r) => setTimeout(r, 200))
  assert.equal(await sbx.isRunning(), false)
  await assert.rejects(Sandbox.connect(sbx.sandboxId), SandboxNotFoundError)
})

test('errors: unknown sandbox, wrong key', opts, async () => {
  await assert.rejects(Sandbox.connect('inosuchsandbox0000000'), SandboxNotFoundError)
  assert.equal(await Sandbox.kill('inosuchsandbox0000000'), false)
  await assert.rejects(Sandbox.create({ apiKey: 'e2b_' + '0'.repeat(40) }), AuthenticationError)
})

test("lifecycle onTimeout 'pause' pauses at the timeout; autoResume resumes on traffic", opts, async () => {
  const tag = unique('pause')
  // Paused at its timeout, kept; traffic to it resumes it (autoResume).
  const sbx = await Sandbox.create({ metadata: { pause: tag }, lifecycle: { onTimeout: 'pause', autoResume: true }, timeoutMs: 3_000 })
  assert.deepEqual((await sbx.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: true })
  await sbx.files.write('/home/user/kept.txt', 'kept across the pause')
  await waitFor(async () => (await Sandbox.getInfo(sbx.sandboxId)).state === 'paused', 15_000, 'paused at its timeout')
  // Any request through the edge router wakes it: here, envd's.
  assert.equal(await sbx.files.read('/home/user/kept.txt'), 'kept across the pause')
  assert.equal((await sbx.getInfo()).state, 'running')
  await sbx.kill()

  // Without autoResume a paused sandbox waits for connect.
  const quiet = await Sandbox.create({ metadata: { pause: tag }, lifecycle: { onTimeout: 'pause' }, timeoutMs: 3_000 })
  await waitFor(async () => (await Sandbox.getInfo(quiet.sandboxId)).state === 'paused', 15_000, 'paused at its timeout')
  await assert.rejects(quiet.commands.run('true', { requestTimeoutMs: 5_000 }))
  const back = await Sandbox.connect(quiet.sandboxId)
  assert.equal((await back.commands.run('echo back')).stdout, 'back\n')
  await back.kill()

  // Traffic to one of its ports wakes it too, and reaches the server
  // that was listening there before the pause.
  const web = await Sandbox.create({ metadata: { pause: tag }, lifecycle: { onTimeout: 'pause', autoResume: true }, timeoutMs: 3_000 })
  await web.files.write('/home/user/www/hello.txt', 'served across a pause')
  await web.commands.run('cd /home/user/www && python3 -m http.server 8000', { background: true, timeoutMs: 0 })
  const base = new URL(process.env.E2B_SANDBOX_URL)
  const viaPort = () => fetch(new URL('/hello.txt', base), { headers: { 'E2b-Sandbox-Id': web.sandboxId, 'E2b-Sandbox-Port': '8000' } })
  await waitFor(async () => (await viaPort()).status === 200, 10_000, 'the web server')
  await waitFor(async () => (await Sandbox.getInfo(web.sandboxId)).state === 'paused', 15_000, 'paused at its timeout')
  const res = await viaPort()
  assert.equal(res.status, 200)
  assert.equal(await res.text(), 'served across a pause')
  assert.equal((await Sandbox.getInfo(web.sandboxId)).state, 'running')
  await Sandbox.kill(web.sandboxId)

  // A request that would be refused once the sandbox runs does not wake
  // it: here, one without the traffic token of a private sandbox, and one
  // to envd without its access token (review 16).
  const priv = await Sandbox.create({ metadata: { pause: tag }, lifecycle: { onTimeout: 'pause', autoResume: true }, timeoutMs: 3_000, network: { allowPublicTraffic: false } })
  assert.ok(priv.trafficAccessToken, 'a private sandbox has a traffic token')
  await priv.commands.run('python3 -m http.server 8001', { background: true, timeoutMs: 0 })
  await waitFor(async () => (await Sandbox.getInfo(priv.sandboxId)).state === 'paused', 15_000, 'paused at its timeout')
  const toPort = (headers) => fetch(new URL('/', base), { headers: { 'E2b-Sandbox-Id': priv.sandboxId, 'E2b-Sandbox-Port': '8001', ...headers } })
  assert.notEqual((await toPort({})).status, 200)
  assert.notEqual((await fetch(new URL('/health', base), { headers: { 'E2b-Sandbox-Id': priv.sandboxId, 'E2b-Sandbox-Port': '49983' } })).status, 204)
  assert.notEqual((await fetch(new URL('/files?path=/etc/hostname&signature=v1_forged', base), { headers: { 'E2b-Sandbox-Id': priv.sandboxId, 'E2b-Sandbox-Port': '49983' } })).status, 200)
  // A valid read signature with a method envd refuses (review 20).
  const signed = new URL(await priv.downloadUrl('/etc/hostname', { useSignatureExpiration: 60_000 }))
  assert.notEqual((await fetch(new URL(signed.pathname + signed.search, base), { method: 'PUT', headers: { 'E2b-Sandbox-Id': priv.sandboxId, 'E2b-Sandbox-Port': '49983' } })).status, 200)
  assert.equal((await Sandbox.getInfo(priv.sandboxId)).state, 'paused', 'woken by requests without credentials')
  await waitFor(async () => (await toPort({ 'E2b-Traffic-Access-Token': priv.trafficAccessToken })).status === 200, 10_000, 'the port with the token')
  assert.equal((await Sandbox.getInfo(priv.sandboxId)).state, 'running')
  await Sandbox.kill(priv.sandboxId)
})

test('Template.exists says which templates a create can use', opts, async () => {
  assert.equal(await Template.exists('base'), true)
  assert.equal(await Template.exists(unique('no-such-template')), false)
})

test('signed URLs work from a plain HTTP client', opts, async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  try {
    const path = `/home/user/${unique('signed')}.txt`
    const up = await sbx.uploadUrl(path, { useSignatureExpiration: 60_000 })
    assert.match(up, /signature=v1_/)
    const form = new FormData()
    form.append('file', new Blob(['signed content']), path)
    const res = await fetch(up, { method: 'POST', body: form })
    assert.equal(res.status, 200, await res.text())
    const down = await sbx.downloadUrl(path)
    assert.equal(await (await fetch(down)).text(), 'signed content')
    // A tampered signature is refused.
    const bad = down.replace(/signature=v1_[^&]+/, 'signature=v1_AAAA')
    const refused = await fetch(bad)
    assert.equal(refused.status, 401)
    assert.deepEqual(await refused.json(), { code: 401, message: 'invalid signature' })
    // An expired one says so in envd's words, which users match on (E2B's
    // own SDK tests expect exactly this body).
    const expired = await fetch(await sbx.downloadUrl(path, { useSignatureExpiration: -10_000 }))
    assert.equal(expired.status, 401)
    assert.deepEqual(await expired.json(), { code: 401, message: 'signature is already expired' })
  } finally {
    await sbx.kill()
  }
})

test('getMetrics reports the sandbox from its cgroups', opts, async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  try {
    const first = await waitFor(async () => (await sbx.getMetrics()).at(0), 10_000, 'a first sample')
    assert.equal(first.cpuCount, 1)
    assert.equal(first.memTotal, 512 * 1024 * 1024, 'memTotal is the sandbox limit')
    assert.ok(first.memUsed > 0 && first.memUsed < first.memTotal, `memUsed ${first.memUsed}`)
    assert.ok(first.diskTotal > 0 && first.diskUsed <= first.diskTotal)
    assert.ok(first.timestamp instanceof Date && Math.abs(first.timestamp - Date.now()) < 60_000)

    // A busy loop shows up in the next samples (taken every 5 s).
    const busySince = Date.now()
    await sbx.commands.run('timeout 20 sh -c "while :; do :; done"', { background: true, timeoutMs: 0 })
    // Samples have whole-second timestamps: only those 2 s after the start
    // cover the busy loop alone.
    const busy = await waitFor(async () => (await sbx.getMetrics()).find((m) => m.timestamp - busySince > 2_000 && m.cpuUsedPct > 50), 15_000, 'a busy sample')
    assert.ok(busy.cpuUsedPct <= 100, `cpuUsedPct ${busy.cpuUsedPct}`)

    const future = await sbx.getMetrics({ start: new Date(Date.now() + 3_600_000) })
    assert.deepEqual(future, [])
  } finally {
    await sbx.kill()
  }
  await assert.rejects(sbx.getMetrics(), SandboxNotFoundError)
})

test('50 creates at once: each sandbox is whole, distinct and listed once', opts, async () => {
  const tag = unique('burst')
  const results = await Promise.allSettled(Array.from({ length: 50 }, () => Sandbox.create({ timeoutMs: 120_000, metadata: { burst: tag } })))
  const made = results.filter((r) => r.status === 'fulfilled').map((r) => r.value)
  try {
    const failures = results.filter((r) => r.status === 'rejected').map((r) => String(r.reason))
    assert.deepEqual(failures, [], 'creates failed on an idle 24 GiB host')
    assert.equal(new Set(made.map((s) => s.sandboxId)).size, 50)
    // Every sandbox works and is its own: its hostname is its id.
    const names = await Promise.all(made.map(async (s) => (await s.commands.run('hostname')).stdout.trim()))
    assert.deepEqual(names, made.map((s) => s.sandboxId))
    const listed = []
    const p = Sandbox.list({ query: { metadata: { burst: tag } }, limit: 20 })
    while (p.hasNext) listed.push(...(await p.nextItems()).map((s) => s.sandboxId))
    assert.deepEqual(listed.sort(), made.map((s) => s.sandboxId).sort())
  } finally {
    await Promise.all(made.map((s) => s.kill()))
  }
})

test('a sandbox that kills its own envd is reported gone, and the server carries on', opts, async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  // The command's shell is envd's child: its parent is envd.
  await sbx.commands.run('kill -9 $PPID', { user: 'root' }).catch(() => {})
  await waitFor(async () => !(await sbx.isRunning()), 10_000, 'isRunning() to turn false')
  await waitFor(async () => (await sbx.getInfo().then(() => false, (e) => e instanceof SandboxNotFoundError)), 10_000, 'getInfo to say not found')
  await assert.rejects(sbx.commands.run('true'))
  const next = await Sandbox.create({ timeoutMs: 60_000 })
  assert.equal((await next.commands.run('echo fine')).stdout, 'fine\n')
  await next.kill()
})
