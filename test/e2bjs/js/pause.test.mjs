// Pause and resume through the control plane (`hutch serve`), with the
// official SDK's calls: sbx.pause(), Sandbox.connect() resuming, list and
// getInfo showing the state. The mode that runs here keeps memory (the
// sandbox is frozen in place): a process counting in its memory goes on
// from where it was. Skipped in debug mode, which has no control plane.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, SandboxNotFoundError } from 'e2b'
import { throughServe, unique, withRuntime } from './helpers.mjs'

const opts = { skip: !throughServe && 'needs hutch serve (E2B_API_KEY)', timeout: 120_000 }

// The counter's number (again, when it caught the file between the
// shell's truncation and its write).
const count = async (sbx) => {
  for (let i = 0; i < 20; i++) {
    const out = (await sbx.commands.run('cat /tmp/count')).stdout.trim()
    if (/^\d+$/.test(out)) return Number(out)
    await new Promise((r) => setTimeout(r, 10))
  }
  throw new Error('/tmp/count never held a number')
}

test('pause keeps memory and files; connect resumes the same sandbox (mode: full, frozen in place)', opts, async () => {
  const tag = unique('pause')
  const sbx = await Sandbox.create({ metadata: { suite: tag }, envs: { KEPT: 'yes' }, timeoutMs: 120_000 })
  await sbx.files.write('/home/user/note.txt', 'written before the pause')
  await sbx.commands.run(`i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done`, { background: true, timeoutMs: 0 })
  await new Promise((r) => setTimeout(r, 500))
  const start = performance.now()
  const before = await count(sbx)

  assert.equal(await sbx.pause(), true)
  const paused = performance.now()
  assert.equal(await sbx.pause(), false, 'a second pause reports already paused')
  assert.equal((await sbx.getInfo()).state, 'paused')
  const listed = await Sandbox.list({ query: { metadata: { suite: tag }, state: ['paused'] } }).nextItems()
  assert.deepEqual(listed.map((s) => [s.sandboxId, s.state]), [[sbx.sandboxId, 'paused']])
  const running = await Sandbox.list({ query: { metadata: { suite: tag }, state: ['running'] } }).nextItems()
  assert.equal(running.length, 0)
  // A paused sandbox's envd is not reachable until it is resumed.
  await assert.rejects(sbx.commands.run('true', { requestTimeoutMs: 5_000 }))

  await new Promise((r) => setTimeout(r, 1500)) // 15 counts, were it running
  const resuming = performance.now()
  const resumed = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 60_000 })
  assert.equal(resumed.sandboxId, sbx.sandboxId)
  assert.equal((await resumed.getInfo()).state, 'running')
  const after = await count(resumed)
  // Memory kept: the same counter, on from where it was. Frozen while
  // paused: it adds at most one per 0.1 s it runs (and one for a sleep that
  // ended while it was frozen), and it ran at most the time outside the
  // pause, however slow the machine.
  const ran = (performance.now() - start - (resuming - paused)) / 1000
  assert.ok(after >= before && after <= before + 10 * ran + 2, `count ${before} → ${after} across a pause of ${((resuming - paused) / 1000).toFixed(1)} s, ${ran.toFixed(1)} s outside it`)
  assert.equal((await resumed.files.read('/home/user/note.txt')), 'written before the pause')
  assert.equal((await resumed.commands.run('echo $KEPT')).stdout, 'yes\n')
  assert.deepEqual((await resumed.getInfo()).metadata, withRuntime({ suite: tag }))
  await resumed.kill()
})

test('pause of an unknown sandbox is not found', opts, async () => {
  await assert.rejects(Sandbox.pause('inosuchsandbox00000000'), SandboxNotFoundError)
  await assert.rejects(Sandbox.connect('inosuchsandbox00000000'), SandboxNotFoundError)
})
