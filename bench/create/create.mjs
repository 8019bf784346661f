// Hutch's side of the create → first command benchmark, through the
// official E2B JS SDK: per iteration, the wall time of
//
//   const sbx = await Sandbox.create()
//   await sbx.commands.run('true')
//
// against the `hutch serve` at E2B_API_URL / E2B_SANDBOX_URL (E2B_API_KEY),
// with the SDK's defaults (internet access allowed, so a server with
// sandbox networking attaches a network to every sandbox), killing the
// sandbox afterwards, outside the timed part. First one cold
// iteration (the first create of this process against this server), then
// -warmup unmeasured ones (failures there are reported, and fatal only if
// all of these failed), then -n measured ones one after the other, then
// -c sandboxes started at once (Promise.allSettled), each timed from its
// own call, and the wall time until the last one has run its command.
// For host CPU per sandbox, each series also reports the host's busy
// jiffies and this process's own CPU time from before its first create to
// after its last kill (the harness subtracts the latter: the client).
//
// Started by the bench/create harness (bench/create.sh); see
// bench/README.md. Progress goes to stderr; the result is one JSON object
// on stdout (times in ms).
//
// The SDK is the one test/e2bjs/js installs (its package-lock.json): 'e2b' is
// resolved from there exactly as `import 'e2b'` in those tests resolves it.
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { performance } from 'node:perf_hooks'
import { fileURLToPath, pathToFileURL } from 'node:url'

const sdkDir = fileURLToPath(new URL('../../test/e2bjs/js/', import.meta.url))
const require = createRequire(sdkDir + 'package.json')
let e2bPath
try {
  e2bPath = require.resolve('e2b')
} catch (err) {
  console.error(`create.mjs: the E2B SDK is not installed in ${sdkDir} (run npm ci there): ${err.message}`)
  process.exit(1)
}
const { Sandbox } = await import(pathToFileURL(e2bPath).href)
const sdkVersion = require('e2b/package.json').version

function flag(name, def) {
  const i = process.argv.indexOf('-' + name)
  if (i < 0) return def
  const v = Number(process.argv[i + 1])
  if (!Number.isInteger(v) || v < 0) {
    console.error(`create.mjs: -${name} wants a whole number`)
    process.exit(2)
  }
  return v
}
const n = flag('n', 100)
const warmup = flag('warmup', 5)
const concurrency = flag('c', 50)

for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) {
  if (!process.env[v]) {
    console.error(`create.mjs: ${v} is not set (bench/create.sh sets it)`)
    process.exit(2)
  }
}

// cpuSample reads the idle (idle + iowait) and total jiffies of all CPUs
// from /proc/stat, as the Go harnesses do; busy is the fields the harness's
// busyJiffies (bench/create/cpu.go) adds up: user, nice, system, irq,
// softirq, steal (guest and guest_nice are already in user and nice). With
// it, the CPU time of this whole process (all threads, µs).
function cpuSample() {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number)
  const u = process.cpuUsage()
  return {
    idle: f[3] + f[4],
    total: f.reduce((a, b) => a + b, 0),
    busy: f[0] + f[1] + f[2] + f[5] + f[6] + f[7],
    selfUs: u.user + u.system,
  }
}

// hostCPU is what the harness needs for host CPU per sandbox over a span.
const hostCPU = (a, b, iters) => ({ busyJiffies: b.busy - a.busy, clientUs: b.selfUs - a.selfUs, iters })

const oneLine = (err) => String(err?.message ?? err).split('\n')[0].slice(0, 200)

// one creates a sandbox and runs `true` in it; the timed part ends when the
// command has finished. The sandbox is returned for killing (also when the
// command failed), so that nothing is left behind.
async function one() {
  const t0 = performance.now()
  let sbx
  try {
    sbx = await Sandbox.create()
    const t1 = performance.now()
    const r = await sbx.commands.run('true')
    const t2 = performance.now()
    if (r.exitCode !== 0) throw new Error(`true exited with ${r.exitCode}`)
    return { sbx, total: t2 - t0, create: t1 - t0, run: t2 - t1 }
  } catch (err) {
    err.sbx = sbx
    throw err
  }
}

async function kill(sbx) {
  if (!sbx) return
  try {
    await sbx.kill()
  } catch (err) {
    console.error(`create.mjs: kill ${sbx.sandboxId}: ${oneLine(err)}`)
  }
}

const out = { sdk: sdkVersion, node: process.version, n, warmup, concurrency }

// The first iteration (the first create of this process against this
// server), then the warm-up. A failure there is reported, not fatal,
// unless every one of them failed.
out.warmFailed = 0
let anyOK = false
for (let i = 0; i <= warmup; i++) {
  try {
    const r = await one()
    await kill(r.sbx)
    anyOK = true
    if (i === 0) {
      out.first = r.total
      out.firstCreate = r.create
      out.firstRun = r.run
    }
  } catch (err) {
    await kill(err.sbx)
    out.warmFailed++
    out.warmErr ??= oneLine(err)
    if (i === 0) out.firstFailed = true
  }
}
if (!anyOK) {
  out.unavailable = out.warmErr
  console.log(JSON.stringify(out))
  process.exit(0)
}

out.seq = { total: [], create: [], run: [], failed: 0 }
const c0 = cpuSample()
let iters = 0
for (let i = 0; i < n; i++) {
  iters++
  try {
    const r = await one()
    out.seq.total.push(r.total)
    out.seq.create.push(r.create)
    out.seq.run.push(r.run)
    await kill(r.sbx)
  } catch (err) {
    await kill(err.sbx)
    out.seq.failed++
    out.seq.firstErr ??= oneLine(err)
  }
  if ((i + 1) % Math.max(1, Math.floor(n / 10)) === 0) process.stderr.write('.')
}
const c1 = cpuSample()
if (c1.total > c0.total) out.seq.busy = 1 - (c1.idle - c0.idle) / (c1.total - c0.total)
Object.assign(out.seq, hostCPU(c0, c1, iters))

if (concurrency > 0) {
  out.conc = { total: [], create: [], run: [], failed: 0 }
  const t0 = performance.now()
  const settled = await Promise.allSettled(Array.from({ length: concurrency }, () => one()))
  out.conc.wall = performance.now() - t0
  const sbxs = []
  for (const s of settled) {
    if (s.status === 'fulfilled') {
      out.conc.total.push(s.value.total)
      out.conc.create.push(s.value.create)
      out.conc.run.push(s.value.run)
      sbxs.push(s.value.sbx)
    } else {
      out.conc.failed++
      out.conc.firstErr ??= oneLine(s.reason)
      sbxs.push(s.reason?.sbx)
    }
  }
  process.stderr.write('.')
  await Promise.all(sbxs.map(kill))
  Object.assign(out.conc, hostCPU(c1, cpuSample(), concurrency))
}

console.log(JSON.stringify(out))
