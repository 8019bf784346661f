// Memory checkpoints, through the official SDK's calls, on a server whose
// sandboxes run on the gvisor runtime (HUTCH_RUNTIME=gvisor): a pause that
// keeps memory saves it to disk and frees the sandbox's processes, a
// connect restores them; a snapshot keeps the running processes, and every
// sandbox made from it goes on with them; a fork restores one checkpoint
// several times. Skipped on other runtimes, which pause and snapshot as
// pause.test.mjs and snapshot.test.mjs say.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { throughServe, runtime, unique, sleep, withRuntime } from './helpers.mjs'

const opts = {
  skip: (!throughServe && 'needs hutch serve (E2B_API_KEY)') || (runtime !== 'gvisor' && `the ${runtime} runtime keeps no memory on disk`),
  timeout: 180_000,
}

// A process that counts in its memory (a shell variable), writing each
// number to /tmp/count: only its memory knows where it is.
async function startCounter(sbx) {
  await sbx.commands.run('i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done', { background: true, timeoutMs: 0 })
  await sleep(400)
}
// The counter rewrites the file: a read between its truncation and its
// write finds it empty, and is made again.
async function readCount(sbx) {
  for (let i = 0; i < 50; i++) {
    const s = (await sbx.commands.run('cat /tmp/count')).stdout.trim()
    if (s !== '') return Number(s)
    await sleep(10)
  }
  throw new Error('/tmp/count stays empty')
}

// goesOnFrom checks that sbx's counter runs, from at least n.
async function goesOnFrom(sbx, n, what) {
  const a = await readCount(sbx)
  assert.ok(a >= n, `${what}: the count went back to ${a} (it was at ${n}): the process started again`)
  await sleep(500)
  const b = await readCount(sbx)
  assert.ok(b > a, `${what}: the counter does not run (${a}, then ${b})`)
  return b
}

test('a pause that keeps memory saves it and frees the processes; connect restores them, ids, tokens and files', opts, async () => {
  const tag = unique('cppause')
  const sbx = await Sandbox.create({ metadata: { suite: tag }, envs: { KEPT: 'yes' }, timeoutMs: 120_000 })
  assert.equal((await sbx.getInfo()).metadata['hutch.runtime'], 'gvisor')
  await sbx.files.write('/home/user/note.txt', 'written before the pause')
  // Memory a process holds and nothing on disk does.
  await sbx.commands.run(`python3 -c "
import socket, os
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', 7000)); s.listen()
secret = os.urandom(8).hex()
open('/tmp/secret-hash', 'w').write(str(hash(secret)))
while True:
    c, _ = s.accept(); c.sendall(secret.encode()); c.close()
"`, { background: true, timeoutMs: 0 })
  await startCounter(sbx)
  const secret = (await sbx.commands.run('sleep 0.3; python3 -c "import socket; print(socket.create_connection((\'127.0.0.1\', 7000)).recv(64).decode())"')).stdout.trim()
  assert.match(secret, /^[0-9a-f]{16}$/)
  const before = await readCount(sbx)

  assert.equal(await sbx.pause(), true)
  assert.equal(await sbx.pause(), false, 'a second pause reports already paused')
  const info = await sbx.getInfo()
  assert.equal(info.state, 'paused')
  assert.deepEqual(info.metadata, withRuntime({ suite: tag }))
  await assert.rejects(sbx.commands.run('true', { requestTimeoutMs: 5_000 }))

  const resumed = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 60_000 })
  assert.equal(resumed.sandboxId, sbx.sandboxId)
  assert.equal(resumed.envdAccessToken, sbx.envdAccessToken, 'the same envd token')
  assert.equal((await resumed.getInfo()).state, 'running')
  await goesOnFrom(resumed, before, 'after the resume')
  assert.equal(await resumed.files.read('/home/user/note.txt'), 'written before the pause')
  assert.equal((await resumed.commands.run('echo $KEPT')).stdout, 'yes\n')
  const again = (await resumed.commands.run('python3 -c "import socket; print(socket.create_connection((\'127.0.0.1\', 7000)).recv(64).decode())"')).stdout.trim()
  assert.equal(again, secret, 'the listening process kept its memory and its socket')
  // It pauses and resumes again.
  assert.equal(await resumed.pause(), true)
  const twice = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 60_000 })
  await goesOnFrom(twice, before, 'after the second resume')
  await twice.kill()
})

test('a snapshot keeps the running processes: sandboxes made from it go on with them, on their own', opts, async () => {
  const tag = unique('cpsnap')
  const sbx = await Sandbox.create({ metadata: { suite: tag }, timeoutMs: 120_000 })
  try {
    await sbx.files.write('/home/user/from.txt', 'from the source')
    await startCounter(sbx)
    const snap = await sbx.createSnapshot()
    const at = await readCount(sbx)
    await goesOnFrom(sbx, at, 'the source after the snapshot')
    const made = []
    try {
      for (let i = 0; i < 2; i++) {
        const s = await Sandbox.create(snap.snapshotId, { metadata: { suite: tag, n: String(i) }, timeoutMs: 60_000 })
        made.push(s)
        assert.notEqual(s.sandboxId, sbx.sandboxId)
        assert.deepEqual((await s.getInfo()).metadata, withRuntime({ suite: tag, n: String(i) }))
        assert.equal(await s.files.read('/home/user/from.txt'), 'from the source')
        const n = await readCount(s)
        assert.ok(n <= at + 10, `a sandbox of the snapshot counts from where the snapshot was (${at}), not ${n}`)
        await goesOnFrom(s, 1, `sandbox ${i} of the snapshot`)
      }
      // Their files are their own.
      await made[0].files.write('/home/user/from.txt', 'changed in 0')
      assert.equal(await made[1].files.read('/home/user/from.txt'), 'from the source')
      assert.equal(await sbx.files.read('/home/user/from.txt'), 'from the source')
      // The envd token of each is its own (v2 sandboxes are secured).
      assert.notEqual(made[0].envdAccessToken, sbx.envdAccessToken)
      const raw = await fetch(`${process.env.E2B_SANDBOX_URL}/envs`, { headers: { 'E2b-Sandbox-Id': made[0].sandboxId, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': sbx.envdAccessToken } })
      assert.notEqual(raw.status, 200, "the source's token does not open a sandbox of its snapshot")
    } finally {
      for (const s of made) await s.kill()
      await Sandbox.deleteSnapshot(snap.snapshotId)
    }
  } finally {
    await sbx.kill()
  }
})

test('fork restores one checkpoint four times: the processes go on in each, independently', opts, async () => {
  const tag = unique('cpfork')
  const sbx = await Sandbox.create({ metadata: { suite: tag }, timeoutMs: 120_000 })
  try {
    await startCounter(sbx)
    const forks = await sbx.fork({ count: 4, timeoutMs: 60_000 })
    try {
      assert.equal(forks.length, 4)
      assert.equal(new Set([...forks.map((f) => f.sandboxId), sbx.sandboxId]).size, 5)
      for (const [i, f] of forks.entries()) {
        await goesOnFrom(f, 1, `fork ${i}`)
        await f.files.write('/tmp/mine', String(i))
      }
      for (const [i, f] of forks.entries()) {
        assert.equal(await f.files.read('/tmp/mine'), String(i), 'each fork has its own files')
      }
      await goesOnFrom(sbx, 1, 'the source')
    } finally {
      for (const f of forks) await f.kill()
    }
  } finally {
    await sbx.kill()
  }
})
