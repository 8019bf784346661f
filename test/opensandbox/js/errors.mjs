// Bad calls through the OpenSandbox TypeScript SDK (pinned in package.json),
// the same as ../sdk_errors.py makes with the Python SDK, printed the same
// way; the Go test (errors_test.go) judges both.
//
// Environment: OPEN_SANDBOX_DOMAIN, OPEN_SANDBOX_API_KEY, OSB_TEMPLATE,
// OSB_MISSING_IMAGE.
import { Sandbox, SandboxManager, SandboxApiException } from '@alibaba-group/opensandbox'

const TEMPLATE = process.env.OSB_TEMPLATE
const UNKNOWN = 'osbtest-no-such-sandbox'

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
    emit(name, (await fn()) ?? {})
  } catch (e) {
    emit(name, { error: errorOf(e) })
  }
}

async function withManager(fn, connectionConfig) {
  const mgr = SandboxManager.create(connectionConfig ? { connectionConfig } : {})
  try {
    await fn(mgr)
    return {}
  } finally {
    await mgr.close()
  }
}

// created is reached only when the server accepted what it should have
// refused.
async function created(opts) {
  const sbx = await Sandbox.create({ readyTimeoutSeconds: 60, ...opts })
  await sbx.kill()
  await sbx.close()
  return { id: sbx.id }
}

await step('unknown-id', () => withManager((m) => m.getSandboxInfo(UNKNOWN)))
await step('kill-unknown', () => withManager((m) => m.killSandbox(UNKNOWN)))
await step('renew-unknown', () => withManager((m) => m.renewSandbox(UNKNOWN, 600)))
await step('wrong-key', () => withManager((m) => m.listSandboxInfos({}), { apiKey: 'wrong-key' }))
await step('missing-image', () => created({ image: process.env.OSB_MISSING_IMAGE }))
await step('bad-resource', () => created({ image: TEMPLATE, resource: { cpu: 'lots', memory: '1Gi' } }))
await step('short-timeout', () => created({ image: TEMPLATE, timeoutSeconds: 30 }))
