// Volumes through the control plane (`hutch serve`), with the official
// SDK: a volume made with Volume.create, written through its content API,
// mounted into two sandboxes at once; a file one sandbox's user writes is
// read in the other and through the content API with the same owner; the
// volume outlives both sandboxes; nothing a sandbox plants in it (symlinks
// out) lets the content API reach the host. The content API is reached at
// E2B_VOLUME_API_URL (the server's URL). Skipped in debug mode.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync, statSync } from 'node:fs'
import { Sandbox, Volume, VolumeNotFoundError, VolumePathNotFoundError } from 'e2b'
import { throughServe, unique } from './helpers.mjs'

const opts = { skip: !throughServe && 'needs hutch serve (E2B_API_KEY)', timeout: 180_000 }

// rejectsWith asserts that p rejects with an error whose message names
// status.
const rejectsWith = (p, status, what) =>
  assert.rejects(p, (err) => {
    assert.match(String(err.message), new RegExp(`^${status}\\b|${status}:`), `${what}: ${err}`)
    return true
  }, what)

test('a volume is shared by two sandboxes, keeps owners, and outlives them', opts, async () => {
  const name = unique('vol')
  const vol = await Volume.create(name)
  assert.equal(vol.name, name)
  assert.ok(vol.volumeId && vol.token, 'create returns an id and a token')
  await rejectsWith(Volume.create(name), 409, 'a duplicate name')
  await rejectsWith(Volume.create('../escape'), 400, 'a name with a slash')
  await rejectsWith(Volume.create('a'.repeat(65)), 400, 'a long name')
  assert.ok((await Volume.list()).some((v) => v.volumeId === vol.volumeId && v.name === name), 'list shows it')

  // Written through the content API, as uid 1000 (the template's user).
  const written = await vol.writeFile('/seed/from-api.txt', 'from the api', { uid: 1000, gid: 1000, mode: 0o640 })
  assert.equal(written.uid, 1000)
  assert.equal(written.mode, 0o640)
  assert.equal(written.type, 'file')

  const before = (await Sandbox.list().nextItems()).length
  await rejectsWith(Sandbox.create({ volumeMounts: { '/mnt/vol': unique('nosuchvolume') } }), 404, 'an unknown volume')
  await rejectsWith(Sandbox.create({ volumeMounts: { '/proc/vol': vol } }), 400, 'a mount under /proc')
  await rejectsWith(Sandbox.create({ volumeMounts: { '/mnt/../etc': vol } }), 400, 'a mount path with ..')
  assert.equal((await Sandbox.list().nextItems()).length, before, 'a refused create made a sandbox')

  const a = await Sandbox.create({ volumeMounts: { '/mnt/vol': vol }, timeoutMs: 120_000 })
  const b = await Sandbox.create({ volumeMounts: { '/home/user/shared': name }, timeoutMs: 120_000 })
  try {
    assert.deepEqual((await a.getInfo()).volumeMounts, [{ name, path: '/mnt/vol' }])
    assert.deepEqual((await Sandbox.getInfo(b.sandboxId)).volumeMounts, [{ name, path: '/home/user/shared' }])

    // Sandbox a's default user (user, uid 1000) writes; b reads it at once.
    await a.files.write('/mnt/vol/from-a.txt', 'written in a')
    assert.equal((await a.commands.run('id -u')).stdout.trim(), '1000')
    assert.equal(await b.files.read('/home/user/shared/from-a.txt'), 'written in a')
    assert.equal((await b.commands.run('stat -c %u:%g /home/user/shared/from-a.txt')).stdout.trim(), '1000:1000')
    assert.equal(await b.files.read('/home/user/shared/seed/from-api.txt'), 'from the api')
    assert.equal((await b.commands.run('stat -c %u:%g:%a /home/user/shared/seed/from-api.txt')).stdout.trim(), '1000:1000:640')
    // b's root writes as root; the content API sees 0.
    await b.commands.run('echo root > /home/user/shared/from-root.txt', { user: 'root' })
    assert.equal((await vol.getInfo('/from-root.txt')).uid, 0)

    // The content API sees a's file with its owner.
    assert.equal(await vol.readFile('/from-a.txt'), 'written in a')
    const info = await vol.getInfo('/from-a.txt')
    assert.equal(info.uid, 1000)
    assert.equal(info.gid, 1000)
    const names = (await vol.list('/')).map((e) => e.name).sort()
    assert.deepEqual(names, ['from-a.txt', 'from-root.txt', 'seed'])

    // In use: destroy is refused and nothing is removed.
    await rejectsWith(Volume.destroy(vol.volumeId), 409, 'destroying a mounted volume')
    assert.equal(await vol.readFile('/from-a.txt'), 'written in a')

    // Escapes: symlinks a sandbox plants, and .. in paths.
    const marker = `/tmp/${unique('hutch-volume-escape')}`
    await a.commands.run('ln -s /etc/passwd /mnt/vol/passwd-link && ln -s / /mnt/vol/root-link && ln -s ../../../../../../tmp /mnt/vol/tmp-link')
    await rejectsWith(vol.readFile('/passwd-link'), 400, 'reading a link to /etc/passwd')
    await rejectsWith(vol.readFile('/root-link/etc/shadow'), 400, 'reading through a link to /')
    await rejectsWith(vol.readFile('/../../../../etc/passwd'), 400, 'reading ../')
    await rejectsWith(vol.writeFile(`/root-link${marker}`, 'pwned'), 400, 'writing through a link to /')
    await rejectsWith(vol.writeFile(`/tmp-link/${marker.slice(5)}`, 'pwned'), 400, 'writing through a relative link out')
    await rejectsWith(vol.makeDir(`/root-link${marker}`), 400, 'mkdir through a link to /')
    // A link itself may be changed; its target never.
    const passwdMode = statSync('/etc/passwd').mode
    await vol.updateMetadata('/passwd-link', { mode: 0o777, uid: 1000 }).catch(() => {})
    assert.equal(statSync('/etc/passwd').mode, passwdMode, 'the host\'s /etc/passwd changed mode')
    assert.equal(statSync('/etc/passwd').uid, 0, 'the host\'s /etc/passwd changed owner')
    assert.equal(existsSync(marker), false, `the host got ${marker}`)
    // A link is listed as a link, not followed.
    const link = await vol.getInfo('/passwd-link')
    assert.equal(link.type, 'symlink')
    assert.equal(link.target, '/etc/passwd')
    // Wrong token: refused.
    const stranger = new Volume(vol.volumeId, name, 'vol_wrong', vol.domain)
    await assert.rejects(stranger.readFile('/from-a.txt'), /Unauthorized|401/)
    await assert.rejects(vol.readFile('/nope'), VolumePathNotFoundError)
  } finally {
    await a.kill()
    await b.kill()
  }

  // The volume outlives both sandboxes.
  const again = await Volume.connect(vol.volumeId)
  assert.equal(again.token, vol.token)
  assert.equal(await again.readFile('/from-a.txt'), 'written in a')
  const c = await Sandbox.create({ volumeMounts: { '/data': vol }, timeoutMs: 60_000 })
  try {
    assert.equal(await c.files.read('/data/from-a.txt'), 'written in a')
  } finally {
    await c.kill()
  }

  await again.remove('/seed')
  assert.equal(await again.exists('/seed/from-api.txt'), false)
  assert.equal(await Volume.destroy(vol.volumeId), true)
  await assert.rejects(Volume.getInfo(vol.volumeId), VolumeNotFoundError)
  assert.equal(await Volume.destroy(vol.volumeId), false)
  // Its token died with it (an unknown volume answers as a wrong token).
  await assert.rejects(again.readFile('/from-a.txt'), /Unauthorized/)
  assert.ok(!(await Volume.list()).some((v) => v.volumeId === vol.volumeId), 'list still shows a destroyed volume')
})

test('a pause without memory, its resume and a fork keep the volumes mounted', opts, async () => {
  const vol = await Volume.create(unique('volpause'))
  const sbx = await Sandbox.create({ volumeMounts: { '/mnt/v': vol }, timeoutMs: 120_000 })
  const forks = []
  try {
    await sbx.files.write('/mnt/v/before.txt', 'before')
    assert.equal(await Sandbox.pause(sbx.sandboxId, { keepMemory: false }), true)
    // Paused, it still holds the volume.
    await rejectsWith(Volume.destroy(vol.volumeId), 409, 'destroying the volume of a paused sandbox')
    await vol.writeFile('/while-paused.txt', 'while paused', { uid: 1000, gid: 1000 })
    const back = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 60_000 })
    assert.equal(await back.files.read('/mnt/v/while-paused.txt'), 'while paused')
    assert.deepEqual((await back.getInfo()).volumeMounts, [{ name: vol.name, path: '/mnt/v' }])

    const made = await back.fork({ count: 1, timeoutMs: 60_000 })
    assert.equal(made.length, 1)
    assert.ok(made[0] instanceof Sandbox, `fork failed: ${made[0]}`)
    forks.push(made[0])
    // The fork shares the volume: what it writes, the source reads.
    await made[0].files.write('/mnt/v/from-fork.txt', 'from the fork')
    assert.equal(await back.files.read('/mnt/v/from-fork.txt'), 'from the fork')
  } finally {
    for (const f of forks) await f.kill()
    await sbx.kill()
  }
  assert.equal(await Volume.destroy(vol.volumeId), true)
})
