// Keep, branch and come back, through the control plane (`hutch serve`)
// with the official SDK's calls: a pause that keeps only files
// (keepMemory: false, mode "filesystem"), a resume that reboots
// (onResume: 'reboot'), snapshots (create, list, create from, delete),
// fork, and the timeout pausing without memory. Skipped in debug mode,
// which has no control plane.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, SandboxNotFoundError } from 'e2b'
import { throughServe, unique, waitFor, sleep, withRuntime, runtime } from './helpers.mjs'

const opts = { skip: !throughServe && 'needs hutch serve (E2B_API_KEY)', timeout: 180_000 }

// startCounter runs a process that counts in its memory and writes each
// number to /tmp/count: it goes on across a pause that keeps memory, and
// is gone after one that keeps files only.
async function startCounter(sbx) {
  await sbx.commands.run('i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done', { background: true, timeoutMs: 0 })
  await sleep(300)
}

const readCount = async (sbx) => Number((await sbx.commands.run('cat /tmp/count')).stdout.trim())
// counting reports whether the counter still counts.
async function counting(sbx) {
  const before = await readCount(sbx)
  await sleep(400)
  return (await readCount(sbx)) !== before
}

test('pause without memory (mode: filesystem) keeps files, ids and tokens, frees the processes; connect boots it again', opts, async () => {
  const tag = unique('fspause')
  const sbx = await Sandbox.create({ metadata: { suite: tag }, envs: { KEPT: 'yes' }, timeoutMs: 120_000 })
  const token = sbx.envdAccessToken
  assert.ok(token, 'v2 sandboxes are secured')
  await sbx.files.write('/home/user/note.txt', 'written before the pause')
  await sbx.commands.run('mkdir -p /home/user/big && head -c 3000000 /dev/urandom > /home/user/big/blob && sha256sum /home/user/big/blob > /home/user/big/sum')
  await sbx.commands.run('rm /etc/motd', { user: 'root' })
  await startCounter(sbx)
  assert.equal(await counting(sbx), true)

  assert.equal(await sbx.pause({ keepMemory: false }), true)
  assert.equal(await sbx.pause({ keepMemory: false }), false, 'a second pause reports already paused')
  assert.equal(await sbx.pause(), false, 'so does one that would keep memory')
  const info = await sbx.getInfo()
  assert.equal(info.state, 'paused')
  assert.deepEqual(info.metadata, withRuntime({ suite: tag }))
  await assert.rejects(sbx.commands.run('true', { requestTimeoutMs: 5_000 }))

  const resumed = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 60_000 })
  assert.equal(resumed.sandboxId, sbx.sandboxId)
  assert.equal((await resumed.getInfo()).state, 'running')
  assert.equal(resumed.envdAccessToken, token, 'the same envd token')
  assert.equal(await resumed.files.read('/home/user/note.txt'), 'written before the pause')
  assert.equal((await resumed.commands.run('sha256sum -c /home/user/big/sum')).exitCode, 0)
  assert.equal((await resumed.commands.run('test -e /etc/motd; echo $?')).stdout, '1\n', 'a deletion is kept too')
  assert.equal((await resumed.commands.run('echo $KEPT')).stdout, 'yes\n')
  assert.equal(await counting(resumed), false, 'processes do not survive a pause without memory')
  // And it pauses again, the same way, with what changed since.
  await resumed.files.write('/home/user/second.txt', 'after the first resume')
  assert.equal(await resumed.pause({ keepMemory: false }), true)
  const again = await Sandbox.connect(sbx.sandboxId)
  assert.equal(await again.files.read('/home/user/second.txt'), 'after the first resume')
  assert.equal(await again.files.read('/home/user/note.txt'), 'written before the pause')
  await again.kill()
  await assert.rejects(Sandbox.connect(sbx.sandboxId), SandboxNotFoundError)
})

test("connect with onResume 'reboot' boots a sandbox paused with its memory again, on its files", opts, async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  try {
    await sbx.files.write('/tmp/kept', 'files stay')
    await startCounter(sbx)
    assert.equal(await sbx.pause(), true)
    const rebooted = await Sandbox.connect(sbx.sandboxId, { onResume: 'reboot' })
    assert.equal(rebooted.sandboxId, sbx.sandboxId)
    assert.equal(await rebooted.files.read('/tmp/kept'), 'files stay')
    assert.equal(await counting(rebooted), false, 'a reboot starts no old process')
  } finally {
    await Sandbox.kill(sbx.sandboxId)
  }
})

test('at its timeout a sandbox made with onTimeout {pause, keepMemory: false} is paused with its files; connect resumes it', opts, async () => {
  const sbx = await Sandbox.create({ timeoutMs: 2_000, lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } })
  try {
    await sbx.files.write('/home/user/left.txt', 'before the timeout')
    await waitFor(async () => (await Sandbox.getInfo(sbx.sandboxId)).state === 'paused', 20_000, 'the timeout to pause it')
    const back = await Sandbox.connect(sbx.sandboxId)
    assert.equal(await back.files.read('/home/user/left.txt'), 'before the timeout')
  } finally {
    await Sandbox.kill(sbx.sandboxId)
  }
})

test('a snapshot keeps the files; the source runs on; create from it, list it, delete it', opts, async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  const name = unique('snap')
  try {
    await sbx.files.write('/home/user/state.txt', 'at the snapshot')
    await startCounter(sbx)
    const snap = await sbx.createSnapshot({ name })
    assert.ok(snap.snapshotId, 'a snapshot id')
    assert.deepEqual(snap.names, [`${name}:default`])
    // The source was only frozen while it was captured.
    assert.equal((await sbx.getInfo()).state, 'running')
    const n = await readCount(sbx)
    await sleep(400)
    assert.ok((await readCount(sbx)) > n, 'the source goes on counting')
    await sbx.files.write('/home/user/state.txt', 'after the snapshot')

    const listed = []
    for (const p = sbx.listSnapshots(); p.hasNext;) listed.push(...(await p.nextItems()))
    assert.deepEqual(listed.map((s) => s.snapshotId), [snap.snapshotId])
    const byName = await Sandbox.listSnapshots({ name }).nextItems()
    assert.deepEqual(byName.map((s) => s.snapshotId), [snap.snapshotId])

    for (const ref of [snap.snapshotId, name]) {
      const copy = await Sandbox.create(ref, { timeoutMs: 60_000 })
      try {
        assert.equal(await copy.files.read('/home/user/state.txt'), 'at the snapshot', `created from ${ref}`)
        // A checkpoint keeps the processes too (checkpoint.test.mjs).
        assert.equal(await counting(copy), runtime === 'gvisor', `a snapshot on the ${runtime} runtime keeps ${runtime === 'gvisor' ? 'the processes' : 'files, not processes'}`)
      } finally {
        await copy.kill()
      }
    }
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false)
    assert.equal((await Sandbox.listSnapshots({ sandboxId: sbx.sandboxId }).nextItems()).length, 0)
    await assert.rejects(Sandbox.create(name))
  } finally {
    await sbx.kill()
  }
})

test('snapshots list by sandbox, a page at a time', opts, async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  try {
    const ids = []
    for (let i = 0; i < 3; i++) ids.push((await sbx.createSnapshot()).snapshotId)
    const p = Sandbox.listSnapshots({ sandboxId: sbx.sandboxId, limit: 2 })
    const first = await p.nextItems()
    assert.equal(first.length, 2)
    assert.equal(p.hasNext, true)
    const rest = await p.nextItems()
    assert.deepEqual([...first, ...rest].map((s) => s.snapshotId).sort(), [...ids].sort())
    for (const id of ids) assert.equal(await Sandbox.deleteSnapshot(id), true)
  } finally {
    await sbx.kill()
  }
})

test('snapshot of an unknown sandbox is not found', opts, async () => {
  await assert.rejects(Sandbox.createSnapshot('inosuchsandbox00000000'), SandboxNotFoundError)
})

test('fork makes independent copies of the files; the source keeps its id and runs on', opts, async () => {
  const tag = unique('fork')
  const sbx = await Sandbox.create({ metadata: { suite: tag }, timeoutMs: 120_000 })
  try {
    await sbx.files.write('/home/user/shared.txt', 'from the source')
    const forks = await sbx.fork({ count: 2, timeoutMs: 60_000 })
    assert.equal(forks.length, 2)
    const ids = forks.map((f) => f.sandboxId)
    assert.equal(new Set([...ids, sbx.sandboxId]).size, 3, 'each fork has its own id')
    for (const f of forks) {
      assert.equal(await f.files.read('/home/user/shared.txt'), 'from the source')
      assert.deepEqual((await f.getInfo()).metadata, withRuntime({ suite: tag }))
    }
    await forks[0].files.write('/home/user/shared.txt', 'changed in fork 0')
    assert.equal(await forks[1].files.read('/home/user/shared.txt'), 'from the source')
    assert.equal(await sbx.files.read('/home/user/shared.txt'), 'from the source')
    assert.equal((await sbx.getInfo()).state, 'running')
    for (const f of forks) await f.kill()
  } finally {
    await sbx.kill()
  }
})

test('fork counts outside 1..100 are refused; an unknown sandbox is not found', opts, async () => {
  const sbx = await Sandbox.create({ timeoutMs: 60_000 })
  try {
    await assert.rejects(sbx.fork({ count: 0 }), /count/)
    await assert.rejects(sbx.fork({ count: 101 }), /count/)
  } finally {
    await sbx.kill()
  }
  await assert.rejects(Sandbox.fork('inosuchsandbox00000000'), SandboxNotFoundError)
})
