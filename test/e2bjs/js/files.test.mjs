// sandbox.files: reading, writing, listing, stat, mkdir, rename, remove.
import { test, before } from 'node:test'
import assert from 'node:assert/strict'
import { FileNotFoundError, NotFoundError, InvalidArgumentError } from 'e2b'
import { connect, unique, HOME } from './helpers.mjs'

const sbx = await connect()
const base = `${HOME}/${unique('files')}`

before(async () => {
  assert.equal(await sbx.files.makeDir(base), true)
})

// statOf returns what stat(1) says about path, as the sandbox sees it.
async function statOf(path, user) {
  const r = await sbx.commands.run(`stat -c '%s|%A|%U|%G|%a' '${path}'`, user ? { user } : {})
  const [size, perms, owner, group, mode] = r.stdout.trim().split('|')
  return { size: Number(size), perms, owner, group, mode: parseInt(mode, 8) }
}

test('write and read text', async () => {
  const path = `${base}/hello.txt`
  const info = await sbx.files.write(path, 'Hello, wörld!\n')
  assert.equal(info.path, path)
  assert.equal(info.name, 'hello.txt')
  assert.equal(info.type, 'file')
  assert.equal(await sbx.files.read(path), 'Hello, wörld!\n')
  const r = await sbx.commands.run(`cat '${path}'`)
  assert.equal(r.stdout, 'Hello, wörld!\n')
})

test('write and read bytes', async () => {
  const path = `${base}/bytes.bin`
  const data = new Uint8Array(256 * 40)
  for (let i = 0; i < data.length; i++) data[i] = (i * 7) % 256
  await sbx.files.write(path, data.buffer)
  const got = await sbx.files.read(path, { format: 'bytes' })
  assert.ok(got instanceof Uint8Array)
  assert.deepEqual(Buffer.from(got), Buffer.from(data))
  const blob = await sbx.files.read(path, { format: 'blob' })
  assert.equal(blob.size, data.length)
  const r = await sbx.commands.run(`sha256sum < '${path}'`)
  const { createHash } = await import('node:crypto')
  assert.equal(r.stdout.split(' ')[0], createHash('sha256').update(data).digest('hex'))
})

test('write and read an empty file', async () => {
  const path = `${base}/empty`
  await sbx.files.write(path, '')
  assert.equal(await sbx.files.read(path), '')
  assert.equal((await sbx.files.read(path, { format: 'bytes' })).length, 0)
  assert.equal((await sbx.files.getInfo(path)).size, 0)
})

test('write overwrites and creates parent directories', async () => {
  const path = `${base}/deep/er/still/file.txt`
  await sbx.files.write(path, 'a much longer first version')
  await sbx.files.write(path, 'short')
  assert.equal(await sbx.files.read(path), 'short')
  const dir = await sbx.files.getInfo(`${base}/deep/er`)
  assert.equal(dir.type, 'dir')
  assert.equal(dir.owner, 'user')
})

test('write several files at once', async () => {
  const files = [
    { path: `${base}/multi/a.txt`, data: 'A' },
    { path: `${base}/multi/sub/b.txt`, data: 'BB' },
    { path: `${base}/multi/c.bin`, data: new Uint8Array([0, 1, 2, 255]).buffer },
  ]
  const infos = await sbx.files.write(files)
  assert.ok(Array.isArray(infos))
  assert.deepEqual(infos.map((i) => i.path).sort(), files.map((f) => f.path).sort())
  for (const i of infos) assert.equal(i.type, 'file')
  assert.equal(await sbx.files.read(`${base}/multi/a.txt`), 'A')
  assert.equal(await sbx.files.read(`${base}/multi/sub/b.txt`), 'BB')
  assert.deepEqual([...(await sbx.files.read(`${base}/multi/c.bin`, { format: 'bytes' }))], [0, 1, 2, 255])

  const infos2 = await sbx.files.writeFiles([{ path: `${base}/multi/d.txt`, data: 'D' }])
  assert.equal(infos2.length, 1)
  assert.equal(infos2[0].path, `${base}/multi/d.txt`)
})

test('gzip and octet-stream uploads, gzip download', async () => {
  const text = 'compressible '.repeat(5000)
  await sbx.files.write(`${base}/gz.txt`, text, { gzip: true })
  assert.equal(await sbx.files.read(`${base}/gz.txt`), text)
  assert.equal(await sbx.files.read(`${base}/gz.txt`, { gzip: true }), text)
  await sbx.files.write(`${base}/octet.txt`, 'octet', { useOctetStream: true })
  assert.equal(await sbx.files.read(`${base}/octet.txt`), 'octet')
  const stream = new ReadableStream({
    start(c) {
      c.enqueue(new TextEncoder().encode('streamed '))
      c.enqueue(new TextEncoder().encode('upload'))
      c.close()
    },
  })
  await sbx.files.write(`${base}/stream.txt`, stream)
  assert.equal(await sbx.files.read(`${base}/stream.txt`), 'streamed upload')
})

test('read as a stream', async () => {
  const path = `${base}/big.txt`
  const text = '0123456789'.repeat(100_000)
  await sbx.files.write(path, text)
  const stream = await sbx.files.read(path, { format: 'stream' })
  let n = 0
  for await (const chunk of stream) n += chunk.length
  assert.equal(n, text.length)
})

test('list with depth', async () => {
  const root = `${base}/tree`
  await sbx.files.write(`${root}/d1/d2/deep.txt`, 'x')
  await sbx.files.write(`${root}/top.txt`, 'top')

  const one = await sbx.files.list(root)
  assert.deepEqual(one.map((e) => e.name).sort(), ['d1', 'top.txt'])
  const d1 = one.find((e) => e.name === 'd1')
  assert.equal(d1.type, 'dir')
  assert.equal(d1.path, `${root}/d1`)
  const top = one.find((e) => e.name === 'top.txt')
  assert.equal(top.type, 'file')
  assert.equal(top.size, 3)
  assert.equal(top.path, `${root}/top.txt`)

  const two = await sbx.files.list(root, { depth: 2 })
  assert.deepEqual(two.map((e) => e.path).sort(), [`${root}/d1`, `${root}/d1/d2`, `${root}/top.txt`])

  const three = await sbx.files.list(root, { depth: 3 })
  assert.deepEqual(three.map((e) => e.path).sort(), [
    `${root}/d1`, `${root}/d1/d2`, `${root}/d1/d2/deep.txt`, `${root}/top.txt`,
  ])
})

test('list errors: missing directory, a file', async () => {
  await assert.rejects(sbx.files.list(`${base}/no-such-dir`), NotFoundError)
  await sbx.files.write(`${base}/plain.txt`, 'p')
  await assert.rejects(sbx.files.list(`${base}/plain.txt`), InvalidArgumentError)
})

test('exists', async () => {
  await sbx.files.write(`${base}/exists.txt`, 'yes')
  assert.equal(await sbx.files.exists(`${base}/exists.txt`), true)
  assert.equal(await sbx.files.exists(base), true)
  assert.equal(await sbx.files.exists(`${base}/does-not-exist.txt`), false)
})

test('getInfo of a file and a directory agrees with stat(1)', async () => {
  const path = `${base}/info.txt`
  await sbx.files.write(path, '12345')
  const info = await sbx.files.getInfo(path)
  const st = await statOf(path)
  assert.equal(info.name, 'info.txt')
  assert.equal(info.path, path)
  assert.equal(info.type, 'file')
  assert.equal(info.size, 5)
  assert.equal(info.owner, 'user')
  assert.equal(info.group, 'user')
  assert.equal(info.permissions, st.perms)
  assert.equal(info.mode, st.mode)
  assert.ok(info.modifiedTime instanceof Date)
  assert.ok(Math.abs(info.modifiedTime.getTime() - Date.now()) < 60_000, `modifiedTime ${info.modifiedTime}`)

  await sbx.commands.run(`chmod 640 '${path}'`)
  const after = await sbx.files.getInfo(path)
  assert.equal(after.permissions, '-rw-r-----')
  assert.equal(after.mode, 0o640)

  const dir = await sbx.files.getInfo(base)
  assert.equal(dir.type, 'dir')
  assert.equal(dir.name, base.split('/').pop())
  assert.equal(dir.owner, 'user')
  assert.equal(dir.permissions, (await statOf(base)).perms)
  assert.match(dir.permissions, /^d/)
})

test('getInfo of a symlink', async () => {
  await sbx.files.write(`${base}/target.txt`, 'target')
  await sbx.commands.run(`ln -s '${base}/target.txt' '${base}/link'`)
  const info = await sbx.files.getInfo(`${base}/link`)
  assert.equal(info.symlinkTarget, `${base}/target.txt`)
  assert.equal(info.name, 'link')
})

test('getInfo of a missing path throws NotFoundError', async () => {
  await assert.rejects(sbx.files.getInfo(`${base}/missing`), NotFoundError)
})

test('makeDir: true, then false when it exists', async () => {
  const dir = `${base}/made/with/parents`
  assert.equal(await sbx.files.makeDir(dir), true)
  assert.equal(await sbx.files.makeDir(dir), false)
  const info = await sbx.files.getInfo(dir)
  assert.equal(info.type, 'dir')
  assert.equal(info.owner, 'user')
  assert.equal((await sbx.files.getInfo(`${base}/made`)).owner, 'user')
})

test('rename', async () => {
  await sbx.files.write(`${base}/old.txt`, 'moving')
  const info = await sbx.files.rename(`${base}/old.txt`, `${base}/renamed/new.txt`)
  assert.equal(info.path, `${base}/renamed/new.txt`)
  assert.equal(info.name, 'new.txt')
  assert.equal(info.type, 'file')
  assert.equal(await sbx.files.exists(`${base}/old.txt`), false)
  assert.equal(await sbx.files.read(`${base}/renamed/new.txt`), 'moving')
  await assert.rejects(sbx.files.rename(`${base}/old.txt`, `${base}/x.txt`), NotFoundError)
})

test('remove a file and a directory tree', async () => {
  await sbx.files.write(`${base}/rm/a/b.txt`, 'b')
  await sbx.files.write(`${base}/rm/c.txt`, 'c')
  await sbx.files.remove(`${base}/rm/c.txt`)
  assert.equal(await sbx.files.exists(`${base}/rm/c.txt`), false)
  await sbx.files.remove(`${base}/rm`)
  assert.equal(await sbx.files.exists(`${base}/rm`), false)
  // Removing what is not there is not an error.
  await sbx.files.remove(`${base}/rm`)
})

test('read a missing file throws FileNotFoundError', async () => {
  await assert.rejects(sbx.files.read(`${base}/nope.txt`), (err) => {
    assert.ok(err instanceof FileNotFoundError, `got ${err?.constructor?.name}: ${err}`)
    assert.ok(err instanceof NotFoundError)
    return true
  })
})

test('read a directory, write onto a directory: InvalidArgumentError', async () => {
  await assert.rejects(sbx.files.read(base), InvalidArgumentError)
  await sbx.files.makeDir(`${base}/adir`)
  await assert.rejects(sbx.files.write(`${base}/adir`, 'x'), InvalidArgumentError)
})

test('relative paths resolve against /home/user', async () => {
  const name = unique('rel') + '.txt'
  const info = await sbx.files.write(name, 'relative')
  assert.equal(info.path, `${HOME}/${name}`)
  assert.equal(await sbx.files.read(name), 'relative')
  assert.equal(await sbx.files.read(`${HOME}/${name}`), 'relative')
  assert.equal((await sbx.files.getInfo(name)).path, `${HOME}/${name}`)
  assert.equal(await sbx.files.exists(name), true)
  const dir = unique('reldir')
  assert.equal(await sbx.files.makeDir(dir), true)
  assert.equal((await sbx.files.getInfo(`${HOME}/${dir}`)).type, 'dir')
  const listed = await sbx.files.list('.')
  assert.ok(listed.some((e) => e.path === `${HOME}/${name}`), `list('.') paths: ${listed.map((e) => e.path)}`)
  await sbx.files.remove(name)
  await sbx.files.remove(dir)
  assert.equal(await sbx.files.exists(`${HOME}/${name}`), false)
})

test("files as user 'root'", async () => {
  const path = `/root/${unique('root')}.txt`
  const info = await sbx.files.write(path, 'secret', { user: 'root' })
  assert.equal(info.path, path)
  const st = await sbx.files.getInfo(path, { user: 'root' })
  assert.equal(st.owner, 'root')
  assert.equal(await sbx.files.read(path, { user: 'root' }), 'secret')
  // Relative paths resolve against root's home.
  assert.equal((await sbx.files.getInfo(path.slice('/root/'.length), { user: 'root' })).path, path)
  await sbx.files.remove(path, { user: 'root' })
})

test('write with metadata', async () => {
  const path = `${base}/meta.txt`
  const info = await sbx.files.write(path, 'm', { metadata: { Author: 'alice', kind: 'report' } })
  assert.deepEqual(info.metadata, { author: 'alice', kind: 'report' })
  assert.deepEqual((await sbx.files.getInfo(path)).metadata, { author: 'alice', kind: 'report' })
  const listed = (await sbx.files.list(base)).find((e) => e.name === 'meta.txt')
  assert.deepEqual(listed.metadata, { author: 'alice', kind: 'report' })
  // A new upload replaces the metadata.
  await sbx.files.write(path, 'm2', { metadata: { kind: 'final' } })
  assert.deepEqual((await sbx.files.getInfo(path)).metadata, { kind: 'final' })
  await sbx.files.write(path, 'm3')
  assert.equal((await sbx.files.getInfo(path)).metadata, undefined)
})

test('downloadUrl and uploadUrl work with a plain fetch', async () => {
  const path = `${base}/url.txt`
  await sbx.files.write(path, 'via url')
  const dl = await sbx.downloadUrl(path)
  const res = await fetch(dl)
  assert.equal(res.status, 200)
  assert.equal(await res.text(), 'via url')

  const ul = await sbx.uploadUrl(`${base}/uploaded.txt`)
  const form = new FormData()
  form.append('file', new Blob(['uploaded via url']), `${base}/uploaded.txt`)
  const up = await fetch(ul, { method: 'POST', body: form })
  assert.equal(up.status, 200)
  assert.equal(await sbx.files.read(`${base}/uploaded.txt`), 'uploaded via url')
})
