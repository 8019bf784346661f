// `hutch mcp --idle-timeout`: a sandbox made through MCP without a
// timeout lives the idle timeout, and each tool call on it extends its
// life to at least the idle timeout from then (see lib.mjs target):
//
//   MCP_API_KEY=KEY IDLE_SECONDS=N node idle.mjs http URL
import assert from 'node:assert/strict'
import { log, target, connect, ok, run } from './lib.mjs'

run(async () => {
  const idle = Number(process.env.IDLE_SECONDS)
  assert.ok(idle > 30, 'IDLE_SECONDS must be set (more than 30)')
  const client = await connect(target())
  const made = await ok(client, 'sandbox_create', {})
  const id = made.sandbox_id
  try {
    assert.ok(made.expires_in_seconds > idle - 10 && made.expires_in_seconds <= idle, `created without a timeout: ${JSON.stringify(made)}`)
    // Shorten its life below the idle timeout; a tool call on it extends it again.
    const short = await ok(client, 'sandbox_renew', { sandbox_id: id, timeout_seconds: 20 })
    assert.ok(short.expires_in_seconds <= 20, `sandbox_renew 20: ${JSON.stringify(short)}`)
    await ok(client, 'command_run', { sandbox_id: id, command: 'true' })
    const info = await ok(client, 'sandbox_get_info', { sandbox_id: id })
    assert.ok(info.expires_in_seconds > idle - 10, `after a command_run the sandbox expires in ${info.expires_in_seconds}s, want about ${idle}s`)
    // A longer timeout asked for is kept.
    const long = await ok(client, 'sandbox_create', { timeout_seconds: idle * 3 })
    assert.ok(long.expires_in_seconds > idle * 2, `sandbox_create timeout_seconds ${idle * 3}: ${JSON.stringify(long)}`)
    await ok(client, 'sandbox_kill', { sandbox_id: long.sandbox_id })
    log('idle timeout', idle, 's: created', made.expires_in_seconds, '; after renew 20 and a command_run', info.expires_in_seconds)
  } finally {
    await ok(client, 'sandbox_kill', { sandbox_id: id })
  }
  await client.close()
  log('PASS')
})
