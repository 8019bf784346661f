// One sandbox, two protocols: a sandbox made through E2B's JS SDK (e2b,
// pinned) used through OpenSandbox's TypeScript SDK, and the reverse, on one
// server and one API key. E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY point
// the E2B SDK at the server, OPEN_SANDBOX_DOMAIN and OPEN_SANDBOX_API_KEY the
// OpenSandbox SDK. Each step prints one JSON line as ../sdk.py does; the Go
// test (cross_test.go) judges them.
//
// Environment: OSB_TEMPLATE, OSB_TAG (see ../sdk.py).
import { Sandbox as E2BSandbox } from 'e2b'
import { Sandbox as OSBSandbox, SandboxManager, SandboxApiException } from '@alibaba-group/opensandbox'

const TEMPLATE = process.env.OSB_TEMPLATE
const TAG = process.env.OSB_TAG

function emit(step, fields) {
  process.stdout.write(JSON.stringify({ step, ...fields }) + '\n')
}

function errorOf(e) {
  const out = { type: e?.name ?? typeof e, message: String(e?.message ?? e) }
  if (e instanceof SandboxApiException) out.status = e.statusCode
  if (e?.error?.code) out.code = e.error.code
  return out
}

async function step(name, fn) {
  try {
    const fields = await fn()
    emit(name, fields ?? {})
    return fields
  } catch (e) {
    emit(name, { error: errorOf(e) })
    return null
  }
}

const lines = (msgs) => msgs.flatMap((m) => m.text.split(/\r?\n/)).filter((l) => l !== '')

// E2B -> OpenSandbox.
let e2b = null
let osb = null
await step('e2b-create', async () => {
  e2b = await E2BSandbox.create(TEMPLATE, { timeoutMs: 5 * 60_000, metadata: { osbtest: TAG, made: 'e2b' } })
  await e2b.files.write('/tmp/from-e2b.txt', `written by e2b ${TAG}\n`)
  return { id: e2b.sandboxId }
})
if (e2b) {
  await step('osb-connect', async () => {
    osb = await OSBSandbox.connect({ sandboxId: e2b.sandboxId })
    const i = await osb.getInfo()
    return { id: osb.id, state: i.status.state, metadata: i.metadata ?? null }
  })
  if (osb) {
    await step('osb-read', async () => ({ content: await osb.files.readFile('/tmp/from-e2b.txt') }))
    await step('osb-run', async () => {
      const ex = await osb.commands.run('cat /tmp/from-e2b.txt; echo "$((6 * 7))" > /tmp/from-osb.txt')
      return { stdout: lines(ex.logs.stdout), exit_code: ex.exitCode ?? null }
    })
    await step('e2b-read-back', async () => ({ content: await e2b.files.read('/tmp/from-osb.txt') }))
    await step('osb-kill', async () => {
      await osb.kill()
      await osb.close()
      return {}
    })
    await step('e2b-running', async () => ({ running: await e2b.isRunning() }))
  }
}

// OpenSandbox -> E2B.
let osb2 = null
await step('osb-create', async () => {
  osb2 = await OSBSandbox.create({ image: TEMPLATE, timeoutSeconds: 300, metadata: { osbtest: TAG, made: 'osb' } })
  await osb2.files.writeFiles([{ path: '/tmp/from-osb.txt', data: `written by opensandbox ${TAG}\n` }])
  return { id: osb2.id }
})
if (osb2) {
  let e2b2 = null
  await step('e2b-connect', async () => {
    e2b2 = await E2BSandbox.connect(osb2.id)
    const i = await e2b2.getInfo()
    return { id: e2b2.sandboxId, template: i.templateId ?? null, name: i.name ?? null, metadata: i.metadata ?? null }
  })
  if (e2b2) {
    await step('e2b-read', async () => ({ content: await e2b2.files.read('/tmp/from-osb.txt') }))
    await step('e2b-run', async () => {
      const r = await e2b2.commands.run('cat /tmp/from-osb.txt', { user: 'root' })
      return { stdout: r.stdout.split('\n').filter((l) => l !== ''), exit_code: r.exitCode }
    })
    await step('e2b-kill', async () => ({ killed: await e2b2.kill() }))
  }
  await step('osb-info-killed', async () => {
    const mgr = SandboxManager.create()
    try {
      await mgr.getSandboxInfo(osb2.id)
      return { found: true }
    } finally {
      await mgr.close()
    }
  })
  await osb2.close()
}
