// A tool call the client cancels stops: the TypeScript SDK client aborts a
// long command_run (AbortSignal: notifications/cancelled), then, on a
// fresh connection, the command must be gone within seconds, not run on to
// its timeout (see lib.mjs target for the command line):
//
//   node cancel.mjs stdio -- HUTCH MCP ARGS...
//   MCP_API_KEY=KEY node cancel.mjs http URL
import assert from 'node:assert/strict'
import { setTimeout as sleep } from 'node:timers/promises'
import { log, target, connect, ok, run } from './lib.mjs'

run(async () => {
  const t = target()
  const admin = await connect(t, { name: 'cancel-admin' })
  const id = (await ok(admin, 'sandbox_create', { timeout_seconds: 120 })).sandbox_id
  const running = async () =>
    Number((await ok(admin, 'command_run', { sandbox_id: id, command: "ps -eo args | grep -c '^sleep 47$' || true" })).stdout.trim())
  try {
    const client = await connect(t, { name: 'cancel-client' })
    const ac = new AbortController()
    const call = client.callTool({ name: 'command_run', arguments: { sandbox_id: id, command: 'sleep 47; echo never' } }, undefined, { signal: ac.signal })
    const deadline = Date.now() + 10_000
    while ((await running()) === 0) {
      assert.ok(Date.now() < deadline, 'the command never started')
      await sleep(100)
    }
    ac.abort('the user pressed stop')
    await assert.rejects(call)
    log('aborted the call; waiting for the command to stop')
    const stopBy = Date.now() + 5_000
    let n
    while ((n = await running()) > 0 && Date.now() < stopBy) await sleep(200)
    assert.equal(n, 0, `the cancelled command_run still runs 5s after the cancel (over ${t.kind}); it would run on to its timeout`)
    await client.close()
    log('the cancelled command stopped')
  } finally {
    await ok(admin, 'sandbox_kill', { sandbox_id: id })
    await admin.close()
  }
  log('PASS')
})
