// The tests' hands on the official E2B SDK: a long-lived node process that
// reads one JSON request per line on stdin and answers one JSON line on
// stdout, so that the Go tests drive sandboxes exactly as a user's program
// would (Sandbox.create with allowInternetAccess/network, commands.run,
// updateNetwork, getInfo, kill) without starting node for every step.
//
// Request:  {"id": 1, "op": "run", "args": {...}}
// Answer:   {"id": 1, "ok": true, "result": ...} or {"id": 1, "ok": false, "error": "..."}
//
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY point the SDK at the server;
// NETPOLICY_E2B_DIR is test/e2bjs/js, where the e2b package is installed.
import { createRequire } from 'node:module'
import path from 'node:path'
import readline from 'node:readline'

const require = createRequire(path.join(process.env.NETPOLICY_E2B_DIR, 'package.json'))
const { Sandbox, CommandExitError } = require('e2b')

const sandboxes = new Map()

async function sandbox(id) {
  let s = sandboxes.get(id)
  if (!s) {
    s = await Sandbox.connect(id)
    sandboxes.set(id, s)
  }
  return s
}

const ops = {
  async create({ opts }) {
    const s = await Sandbox.create({ timeoutMs: 600_000, ...opts })
    sandboxes.set(s.sandboxId, s)
    return { sandboxId: s.sandboxId }
  },
  // run waits for a command; a non-zero exit is a result, not an error.
  async run({ sandboxId, cmd, user, timeoutMs }) {
    const s = await sandbox(sandboxId)
    try {
      const r = await s.commands.run(cmd, { user, timeoutMs: timeoutMs ?? 60_000 })
      return { exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr }
    } catch (e) {
      if (e instanceof CommandExitError) {
        return { exitCode: e.exitCode, stdout: e.stdout, stderr: e.stderr }
      }
      throw e
    }
  },
  // spawn starts a command that outlives the request (no deadline).
  async spawn({ sandboxId, cmd, user }) {
    const s = await sandbox(sandboxId)
    const h = await s.commands.run(cmd, { user, background: true, timeoutMs: 0 })
    await h.disconnect()
    return { pid: h.pid }
  },
  async update({ sandboxId, network }) {
    const s = await sandbox(sandboxId)
    await s.updateNetwork(network)
    return {}
  },
  async info({ sandboxId }) {
    const s = await sandbox(sandboxId)
    const i = await s.getInfo()
    return { sandboxId: i.sandboxId, allowInternetAccess: i.allowInternetAccess ?? null, network: i.network ?? null }
  },
  async kill({ sandboxId }) {
    sandboxes.delete(sandboxId)
    return { killed: await Sandbox.kill(sandboxId) }
  },
  async list() {
    const ids = []
    const p = Sandbox.list({ limit: 100 })
    while (p.hasNext) {
      for (const s of await p.nextItems()) ids.push(s.sandboxId)
    }
    return { ids }
  },
}

function answer(msg) {
  process.stdout.write(JSON.stringify(msg) + '\n')
}

const rl = readline.createInterface({ input: process.stdin })
rl.on('line', (line) => {
  let req
  try {
    req = JSON.parse(line)
  } catch (e) {
    answer({ id: -1, ok: false, error: 'bad request: ' + e.message })
    return
  }
  const op = ops[req.op]
  if (!op) {
    answer({ id: req.id, ok: false, error: 'unknown op ' + req.op })
    return
  }
  op(req.args ?? {}).then(
    (result) => answer({ id: req.id, ok: true, result }),
    (e) => answer({ id: req.id, ok: false, error: `${e?.name ?? 'Error'}: ${e?.message ?? e}` }),
  )
})
// The Go side closes stdin when it is done: leave at once, whatever is
// still pending.
rl.on('close', () => process.exit(0))
