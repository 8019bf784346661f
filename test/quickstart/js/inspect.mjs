// What a user checks after the quick start, done just before its
// sbx.kill(): loaded with `node --import` (NODE_OPTIONS) by test/quickstart
// when QUICKSTART_CHECK_OUT names a file, it wraps Sandbox.prototype.kill so
// that, on the sandbox index.ts configured, it first
//   - runs `claude mcp list` and reads the configuration `claude mcp add`
//     wrote (~/.claude.json) in the sandbox, as its user;
//   - sends an MCP initialize and a tools/list to betaGetMcpUrl() with
//     betaGetMcpToken() as the bearer token (and once without it),
// writes what it found to that file as JSON, then kills the sandbox as the
// script asked. It changes nothing else the script does.
import { writeFileSync } from 'node:fs'
import { Sandbox } from 'e2b'

const out = process.env.QUICKSTART_CHECK_OUT

// mcpPost sends one JSON-RPC request and returns the status and the
// message (from a JSON body or the first SSE data line).
async function mcpPost(url, token, body) {
  const headers = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }
  if (token) headers.authorization = `Bearer ${token}`
  const res = await fetch(url, { method: 'POST', headers, body: JSON.stringify(body) })
  const text = await res.text()
  let message = null
  const data = text.split('\n').find((l) => l.startsWith('data:'))
  try {
    message = JSON.parse(data ? data.slice(5) : text)
  } catch {
    message = text
  }
  return { status: res.status, message }
}

async function run(sbx, cmd) {
  try {
    const r = await sbx.commands.run(cmd, { timeoutMs: 120_000 })
    return { exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr }
  } catch (e) {
    return { exitCode: e.exitCode ?? -1, stdout: e.stdout ?? '', stderr: e.stderr ?? String(e) }
  }
}

if (out) {
  const kill = Sandbox.prototype.kill
  Sandbox.prototype.kill = async function (...args) {
    const report = { sandboxId: this.sandboxId }
    try {
      report.mcpUrl = this.betaGetMcpUrl()
      report.mcpToken = await this.betaGetMcpToken()
      report.whoami = (await run(this, 'id -un && echo $HOME')).stdout
      report.mcpList = await run(this, 'claude mcp list')
      report.claudeJson = await this.files.read('/home/user/.claude.json')
      const init = {
        jsonrpc: '2.0', id: 1, method: 'initialize',
        params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'hutch-quickstart', version: '1' } },
      }
      report.initialize = await mcpPost(report.mcpUrl, report.mcpToken, init)
      report.toolsList = await mcpPost(report.mcpUrl, report.mcpToken, { jsonrpc: '2.0', id: 2, method: 'tools/list', params: {} })
      report.noToken = await mcpPost(report.mcpUrl, '', init)
    } catch (e) {
      report.error = String(e?.stack ?? e)
    }
    writeFileSync(out, JSON.stringify(report, null, 2))
    return kill.apply(this, args)
  }
}
