// The OpenSandbox TypeScript SDK (@alibaba-group/opensandbox, pinned in
// package.json), unchanged, through the same calls as ../sdk.py makes with
// the Python SDK, against the server OPEN_SANDBOX_DOMAIN and
// OPEN_SANDBOX_API_KEY name. Each step prints one JSON line, {"step": name,
// ...what it saw} or {"step": name, "error": {...}}, with the Python
// script's step names and fields; a failed step does not stop the ones
// after it. The Go test (sdk_test.go) judges the lines.
//
// Environment: OSB_TEMPLATE, OSB_IMAGE, OSB_TAG, OSB_HOST_SECRET (see ../sdk.py).
import { Sandbox, SandboxManager, SandboxApiException } from '@alibaba-group/opensandbox'

const TEMPLATE = process.env.OSB_TEMPLATE
const IMAGE = process.env.OSB_IMAGE
const TAG = process.env.OSB_TAG

function emit(step, fields) {
  process.stdout.write(JSON.stringify({ step, ...fields }) + '\n')
}

// errorOf is what a user sees of a failure: the HTTP status and
// OpenSandbox's code.
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

const iso = (d) => (d == null ? null : d.toISOString())
// lines are the lines of stdout or stderr messages, however execd split them.
const lines = (msgs) => msgs.flatMap((m) => m.text.split(/\r?\n/)).filter((l) => l !== '')
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

async function run(sbx, command, opts) {
  const ex = await sbx.commands.run(command, opts)
  return { stdout: lines(ex.logs.stdout), stderr: lines(ex.logs.stderr), exit_code: ex.exitCode ?? null }
}

let sbx = null
let imageSbx = null
const created = {}

await step('create', async () => {
  sbx = await Sandbox.create({
    image: TEMPLATE,
    timeoutSeconds: 300,
    env: { OSB_ENV: 'from-create' },
    metadata: { osbtest: TAG },
    resource: { cpu: '1', memory: '1Gi' },
  })
  const info = await sbx.getInfo()
  Object.assign(created, { id: sbx.id, expires_at: iso(info.expiresAt) })
  return { id: sbx.id, state: info.status.state, expires_at: iso(info.expiresAt) }
})

if (sbx) {
  await step('info', async () => {
    const i = await sbx.getInfo()
    return { id: i.id, state: i.status.state, metadata: i.metadata ?? null, image: i.image?.uri ?? null }
  })
  await step('healthy', async () => ({ healthy: await sbx.isHealthy() }))
  await step('run', () => run(sbx, 'echo hello; echo oops >&2; echo $OSB_ENV'))
  await step('run-exit', () => run(sbx, 'echo before; exit 3'))
  await step('run-cwd', () => run(sbx, 'pwd', { workingDirectory: '/tmp' }))

  const d = `/tmp/osb-${TAG}`
  const none = async (p) => { await p; return {} }
  const content = async (p) => ({ content: await p })
  const paths = async (p) => ({ paths: (await p).map((e) => e.path).sort() })
  await step('mkdir', () => none(sbx.files.createDirectories([{ path: `${d}/sub`, mode: 755 }])))
  await step('write', () => none(sbx.files.writeFiles([{ path: `${d}/a.txt`, data: 'alpha beta alpha\n' }])))
  await step('read', () => content(sbx.files.readFile(`${d}/a.txt`)))
  await step('read-range', () => content(sbx.files.readFile(`${d}/a.txt`, { range: 'bytes=0-4' })))
  await step('search', () => paths(sbx.files.search({ path: d, pattern: '*.txt' })))
  await step('move', () => none(sbx.files.moveFiles([{ src: `${d}/a.txt`, dest: `${d}/sub/b.txt` }])))
  await step('search-moved', () => paths(sbx.files.search({ path: d, pattern: '*.txt' })))
  await step('replace', async () => {
    const res = await sbx.files.replaceContentsDetailed([{ path: `${d}/sub/b.txt`, oldContent: 'alpha', newContent: 'omega' }])
    return { results: res.map((r) => ({ path: r.path, replaced: r.replacedCount })) }
  })
  await step('read-replaced', () => content(sbx.files.readFile(`${d}/sub/b.txt`)))
  await step('delete', () => none(sbx.files.deleteFiles([`${d}/sub/b.txt`])))
  await step('read-deleted', () => content(sbx.files.readFile(`${d}/sub/b.txt`)))
  await step('rmdir', () => none(sbx.files.deleteDirectories([d])))
  await step('rmdir-gone', () => run(sbx, `test -e ${d}; echo $?`))
  await step('read-traversal', () => content(sbx.files.readFile('/tmp/../../../../../etc/hostname')))
  await step('hostname', () => run(sbx, 'cat /etc/hostname'))
  // A host file, however many ../ lead to it, is not the sandbox's.
  await step('read-host-secret', () => content(sbx.files.readFile(`/../../../..${process.env.OSB_HOST_SECRET}`)))

  await step('endpoint-execd', async () => {
    const ep = await sbx.getEndpoint(44772)
    return { endpoint: ep.endpoint, headers: Object.keys(ep.headers ?? {}).sort() }
  })
  await step('endpoint-http', async () => {
    await sbx.files.writeFiles([{ path: '/tmp/www/index.html', data: `served ${TAG}\n` }])
    await sbx.commands.run('cd /tmp/www && exec python3 -m http.server 8080', { background: true })
    const ep = await sbx.getEndpoint(8080)
    const url = `${sbx.connectionConfig.protocol}://${ep.endpoint}/index.html`
    // The server in the sandbox takes a moment to listen: retried until it
    // answers or 30 s pass.
    let last = null
    for (let i = 0; i < 150; i++) {
      try {
        const r = await fetch(url, { headers: ep.headers ?? {} })
        const body = await r.text()
        if (r.status === 200) return { endpoint: ep.endpoint, status: r.status, body }
        last = `${r.status} ${body.slice(0, 200)}`
      } catch (e) {
        last = String(e)
      }
      await sleep(200)
    }
    return { endpoint: ep.endpoint, status: null, body: last }
  })
  await step('metrics', async () => {
    const m = await sbx.getMetrics()
    return { cpu_count: m.cpuCount, memory_total_mib: m.memoryTotalMiB, memory_used_mib: m.memoryUsedMiB, timestamp: m.timestamp }
  })
  await step('renew', async () => {
    const r = await sbx.renew(20 * 60)
    const i = await sbx.getInfo()
    return { old: created.expires_at ?? null, new: iso(r.expiresAt), info: iso(i.expiresAt) }
  })

  await step('create-image', async () => {
    imageSbx = await Sandbox.create({ image: IMAGE, timeoutSeconds: 300, metadata: { osbtest: TAG } })
    const i = await imageSbx.getInfo()
    return { id: imageSbx.id, state: i.status.state, image: i.image?.uri ?? null }
  })
  if (imageSbx) await step('image-run', () => run(imageSbx, 'cat /etc/osb-mark; id -u'))

  await step('list', async () => {
    const mgr = SandboxManager.create()
    try {
      const page = await mgr.listSandboxInfos({ metadata: { osbtest: TAG } })
      return { ids: page.items.map((i) => i.id).sort(), states: [...new Set(page.items.map((i) => i.status.state))].sort() }
    } finally {
      await mgr.close()
    }
  })
  await step('kill', async () => {
    const ids = []
    for (const s of [sbx, imageSbx]) {
      if (!s) continue
      await s.kill()
      ids.push(s.id)
      await s.close()
    }
    return { ids }
  })
  await step('info-killed', async () => {
    const mgr = SandboxManager.create()
    try {
      await mgr.getSandboxInfo(created.id)
      return { found: true }
    } finally {
      await mgr.close()
    }
  })
}
