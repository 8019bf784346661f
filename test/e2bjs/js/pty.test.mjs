// sandbox.pty: interactive terminals.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { CommandExitError } from 'e2b'
import { connect, waitFor } from './helpers.mjs'

const sbx = await connect()
const enc = new TextEncoder()

function terminal() {
  const dec = new TextDecoder()
  const t = { out: '', onData: (d) => { t.out += dec.decode(d, { stream: true }) } }
  return t
}

test('pty: create, sendInput, resize, stty size, kill', async () => {
  const t = terminal()
  const h = await sbx.pty.create({ cols: 80, rows: 24, onData: t.onData })
  after(() => sbx.pty.kill(h.pid).catch(() => {}))
  assert.ok(Number.isInteger(h.pid) && h.pid > 0)
  assert.ok((await sbx.commands.list()).some((p) => p.pid === h.pid), 'pty not in commands.list()')

  // $((…)) makes the markers appear only in the command's output, not in
  // the terminal's echo of the input.
  await sbx.pty.sendInput(h.pid, enc.encode('stty size; echo "A$((40+2))"; echo "T=$TERM"; id -un; echo "Z$((1+2))"\n'))
  // Z3 comes last: everything asserted below has arrived by then.
  await waitFor(() => t.out.includes('Z3'), 10_000, () => `first output (got ${JSON.stringify(t.out)})`)
  assert.match(t.out, /24 80\r\n/)
  assert.match(t.out, /T=xterm-256color/)
  assert.match(t.out, /\r\nuser\r\n/)

  await sbx.pty.resize(h.pid, { cols: 100, rows: 30 })
  await sbx.pty.sendInput(h.pid, enc.encode('stty size; echo "B$((40+3))"\n'))
  await waitFor(() => t.out.includes('B43'), 10_000, () => `second output (got ${JSON.stringify(t.out)})`)
  assert.match(t.out, /30 100\r\n/)

  assert.equal(await sbx.pty.kill(h.pid), true)
  await assert.rejects(h.wait(), CommandExitError)
  assert.equal(await sbx.pty.kill(999999), false)
})

test('pty: exit ends the session with its exit code', async () => {
  const t = terminal()
  const h = await sbx.pty.create({ cols: 120, rows: 40, onData: t.onData, user: 'root', cwd: '/tmp' })
  after(() => sbx.pty.kill(h.pid).catch(() => {}))
  await sbx.pty.sendInput(h.pid, enc.encode('echo "W=$(pwd) U=$(id -u)"; exit 0\n'))
  const r = await h.wait()
  assert.equal(r.exitCode, 0)
  assert.match(t.out, /W=\/tmp U=0/)
})

test('pty: ctrl-c interrupts the foreground program', async () => {
  const t = terminal()
  const h = await sbx.pty.create({ cols: 80, rows: 24, onData: t.onData })
  after(() => sbx.pty.kill(h.pid).catch(() => {}))
  await sbx.pty.sendInput(h.pid, enc.encode('sleep 30; echo "S$((1+1))"\n'))
  await new Promise((r) => setTimeout(r, 500))
  await sbx.pty.sendInput(h.pid, new Uint8Array([3]))
  await sbx.pty.sendInput(h.pid, enc.encode('echo "C$((2+2))"\n'))
  await waitFor(() => t.out.includes('C4'), 10_000, () => `output after ^C (got ${JSON.stringify(t.out)})`)
  assert.ok(!t.out.includes('S2'), 'sleep was not interrupted')
  assert.equal(await h.kill(), true)
})
