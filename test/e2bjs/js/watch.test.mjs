// sandbox.files.watchDir: filesystem events.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { NotFoundError, FilesystemEventType } from 'e2b'
import { connect, unique, waitFor, sleep, HOME } from './helpers.mjs'

const sbx = await connect()

const has = (events, type, name) => events.some((e) => e.type === type && e.name === name)
const show = (events) => JSON.stringify(events.map((e) => `${e.type}:${e.name}`))

// The example from E2B's documentation ("Watch directory for changes"):
// files.write into a watched directory is reported as a write to that file.
test('watchDir: files.write is seen as create and write of the file, and nothing else', async () => {
  const dir = `${HOME}/${unique('watchdoc')}`
  await sbx.files.makeDir(dir)
  const events = []
  const w = await sbx.files.watchDir(dir, (e) => events.push(e))
  try {
    await sbx.files.write(`${dir}/my-file`, 'hello')
    await waitFor(() => has(events, FilesystemEventType.WRITE, 'my-file'), 5000,
      () => `a write event for my-file (got ${show(events)})`)
    assert.ok(has(events, FilesystemEventType.CREATE, 'my-file'), `got ${show(events)}`)
    await sleep(300)
    assert.deepEqual([...new Set(events.map((e) => e.name))], ['my-file'], `unexpected names in ${show(events)}`)
  } finally {
    await w.stop()
  }
})

test('watchDir recursive: create, write, remove, rename events with names; stop', async () => {
  const dir = `${HOME}/${unique('watch')}`
  await sbx.files.makeDir(dir)
  const events = []
  const w = await sbx.files.watchDir(dir, (e) => events.push(e), { recursive: true })
  try {
    await sbx.files.write(`${dir}/a.txt`, 'hello')
    await waitFor(() => has(events, 'create', 'a.txt'), 10_000, () => `create a.txt (got ${show(events)})`)
    await sbx.commands.run(`echo more >> '${dir}/a.txt'`)
    await waitFor(() => has(events, 'write', 'a.txt'), 10_000, () => `write a.txt (got ${show(events)})`)

    await sbx.files.makeDir(`${dir}/sub`)
    await waitFor(() => has(events, 'create', 'sub'), 10_000, () => `create sub (got ${show(events)})`)
    // Give the watcher a moment to add the new subdirectory.
    await sleep(300)
    await sbx.commands.run(`echo nested > '${dir}/sub/b.txt'`)
    await waitFor(() => has(events, 'create', 'sub/b.txt') && has(events, 'write', 'sub/b.txt'), 10_000,
      () => `create+write sub/b.txt (got ${show(events)})`)
    await sbx.files.write(`${dir}/sub/c.txt`, 'uploaded')
    await waitFor(() => has(events, 'create', 'sub/c.txt'), 10_000, () => `create sub/c.txt (got ${show(events)})`)

    await sbx.files.remove(`${dir}/a.txt`)
    await waitFor(() => has(events, 'remove', 'a.txt'), 10_000, () => `remove a.txt (got ${show(events)})`)

    await sbx.files.rename(`${dir}/sub/b.txt`, `${dir}/moved.txt`)
    await waitFor(() => has(events, 'rename', 'sub/b.txt') && has(events, 'create', 'moved.txt'), 10_000,
      () => `rename sub/b.txt -> moved.txt (got ${show(events)})`)

    await sbx.commands.run(`chmod 600 '${dir}/moved.txt'`)
    await waitFor(() => has(events, 'chmod', 'moved.txt'), 10_000, () => `chmod moved.txt (got ${show(events)})`)

    for (const e of events) assert.equal(e.entry, undefined, 'entry without includeEntry')
  } finally {
    await w.stop()
  }
  await sleep(200)
  const n = events.length
  await sbx.files.write(`${dir}/after-stop.txt`, 'x')
  await sleep(700)
  assert.deepEqual(events.slice(n), [], `events after stop: ${show(events.slice(n))}`)
})

test('watchDir non-recursive ignores subdirectories', async () => {
  const dir = `${HOME}/${unique('watchflat')}`
  await sbx.files.makeDir(`${dir}/sub`)
  const events = []
  const w = await sbx.files.watchDir(dir, (e) => events.push(e))
  try {
    await sbx.commands.run(`echo x > '${dir}/sub/inner.txt'; echo y > '${dir}/top.txt'`)
    await waitFor(() => has(events, 'create', 'top.txt'), 10_000, () => `create top.txt (got ${show(events)})`)
    await sleep(300)
    assert.ok(!events.some((e) => e.name.includes('inner.txt')), `got ${show(events)}`)
  } finally {
    await w.stop()
  }
})

test('watchDir includeEntry: events carry the entry', async () => {
  const dir = `${HOME}/${unique('watchentry')}`
  await sbx.files.makeDir(dir)
  const events = []
  const w = await sbx.files.watchDir(dir, (e) => events.push(e), { includeEntry: true })
  try {
    await sbx.commands.run(`printf 'entry!' > '${dir}/e.txt'`)
    await waitFor(() => events.some((e) => e.name === 'e.txt' && e.type === 'write' && e.entry?.size === 6), 10_000,
      () => `write e.txt with its entry (got ${JSON.stringify(events)})`)
    const ev = events.find((e) => e.name === 'e.txt' && e.type === 'write' && e.entry)
    assert.equal(ev.entry.name, 'e.txt')
    assert.equal(ev.entry.path, `${dir}/e.txt`)
    assert.equal(ev.entry.type, 'file')
    assert.equal(ev.entry.owner, 'user')
    assert.ok(ev.entry.modifiedTime instanceof Date)
  } finally {
    await w.stop()
  }
})

test('watchDir on a missing directory throws NotFoundError', async () => {
  await assert.rejects(sbx.files.watchDir(`${HOME}/${unique('nowatch')}`, () => {}), NotFoundError)
})

test('watchDir timeoutMs ends the watch and calls onExit', async () => {
  const dir = `${HOME}/${unique('watchto')}`
  await sbx.files.makeDir(dir)
  let exited = null
  const started = Date.now()
  await sbx.files.watchDir(dir, () => {}, { timeoutMs: 1000, onExit: (err) => { exited = { err } } })
  await waitFor(() => exited, 10_000, 'onExit')
  assert.ok(Date.now() - started < 8000)
})
