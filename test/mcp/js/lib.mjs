// Shared by the scripts test/mcp runs: connecting the official TypeScript
// MCP SDK client to `hutch mcp` and reading tool results.
import assert from 'node:assert/strict'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StdioClientTransport, getDefaultEnvironment } from '@modelcontextprotocol/sdk/client/stdio.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'

// 27 of the 29 tools of `hutch mcp`: run_code and create_code_context need
// a code-interpreter-v1 sandbox (test/sdk TestMCPRunCode drives them).
export const TOOLS = [
  'sandbox_create', 'sandbox_connect', 'sandbox_kill', 'sandbox_get_info', 'sandbox_list',
  'sandbox_renew', 'sandbox_healthcheck', 'sandbox_get_metrics', 'sandbox_get_endpoint',
  'sandbox_pause', 'sandbox_resume', 'sandbox_snapshot', 'sandbox_fork',
  'command_run', 'command_start', 'command_output', 'command_interrupt',
  'file_read', 'file_write', 'file_delete', 'file_list', 'file_search',
  'file_create_directories', 'file_delete_directories', 'file_move',
  'file_replace_contents', 'file_edit',
]

// Tools that only look: they must say so (readOnlyHint).
export const READ_ONLY = [
  'sandbox_get_info', 'sandbox_list', 'sandbox_healthcheck', 'sandbox_get_metrics',
  'sandbox_get_endpoint', 'command_output', 'file_read', 'file_list', 'file_search',
]

// Tools that change something: they must not claim readOnlyHint.
export const MUTATING = [
  'sandbox_create', 'sandbox_kill', 'sandbox_renew', 'sandbox_pause', 'sandbox_resume',
  'sandbox_snapshot', 'sandbox_fork', 'command_run', 'command_start',
  'command_interrupt', 'file_write', 'file_delete', 'file_create_directories',
  'file_delete_directories', 'file_move', 'file_replace_contents', 'file_edit',
]

export function log(...args) {
  console.log(`[${new Date().toISOString().slice(11, 23)}]`, ...args)
}

// target parses the command line:
//   stdio -- COMMAND ARG...   spawn `hutch mcp --transport stdio` (env: this
//                             process's HUTCH_* variables and the defaults)
//   http URL                  streamable HTTP; the bearer key is $MCP_API_KEY
export function target(argv = process.argv.slice(2)) {
  const [kind, ...rest] = argv
  if (kind === 'stdio') {
    const cmd = rest[0] === '--' ? rest.slice(1) : rest
    assert.ok(cmd.length > 0, 'usage: stdio -- COMMAND ARG...')
    return { kind, command: cmd[0], args: cmd.slice(1), rest: [] }
  }
  if (kind === 'http') {
    assert.ok(rest[0], 'usage: http URL')
    return { kind, url: rest[0], key: process.env.MCP_API_KEY, rest: rest.slice(1) }
  }
  throw new Error(`unknown transport ${kind}: want stdio or http`)
}

// connect starts a client on t; key overrides t.key for http.
export async function connect(t, { key = t.key, name = 'hutch-test-client' } = {}) {
  const client = new Client({ name, version: '1.0.0' })
  let transport
  if (t.kind === 'stdio') {
    const env = { ...getDefaultEnvironment() }
    for (const [k, v] of Object.entries(process.env)) {
      if (k.startsWith('HUTCH_')) env[k] = v
    }
    transport = new StdioClientTransport({ command: t.command, args: t.args, env, stderr: 'inherit' })
  } else {
    const headers = key === undefined ? {} : { Authorization: `Bearer ${key}` }
    transport = new StreamableHTTPClientTransport(new URL(t.url), { requestInit: { headers } })
  }
  await client.connect(transport)
  return client
}

// listTools returns every tool, following pagination.
export async function listTools(client) {
  const tools = []
  let cursor
  do {
    const page = await client.listTools(cursor ? { cursor } : {})
    tools.push(...page.tools)
    cursor = page.nextCursor
  } while (cursor)
  return tools
}

// text is the text of a tool result's content (every result must have one).
export function text(result) {
  assert.ok(Array.isArray(result.content), `no content array: ${JSON.stringify(result)}`)
  const parts = result.content.filter((c) => c.type === 'text').map((c) => c.text)
  assert.ok(parts.length > 0, `every tool result must have a text content (clients that show only text show nothing); this one has none: ${JSON.stringify(result)}`)
  return parts.join('\n')
}

// call calls a tool and returns its result; the call itself must not fail
// at the protocol level (tool failures are results with isError).
export async function call(client, name, args = {}) {
  const result = await client.callTool({ name, arguments: args })
  text(result)
  return result
}

// ok calls a tool that must succeed and returns its structured content
// (or, lacking one, its text parsed as JSON, or the text).
export async function ok(client, name, args = {}) {
  const result = await call(client, name, args)
  assert.ok(!result.isError, `${name} ${JSON.stringify(args)} failed: ${text(result)}`)
  if (result.structuredContent !== undefined) return result.structuredContent
  const s = text(result)
  try {
    return JSON.parse(s)
  } catch {
    return s
  }
}

// okText calls a tool that must succeed and returns its text content
// (file_read's is the file; its structured content describes it).
export async function okText(client, name, args = {}) {
  const result = await call(client, name, args)
  assert.ok(!result.isError, `${name} ${JSON.stringify(args)} failed: ${text(result)}`)
  return text(result)
}

// fails calls a tool that must fail as a tool result (isError) and returns
// the error text.
export async function fails(client, name, args = {}) {
  const result = await call(client, name, args)
  assert.equal(result.isError, true, `${name} ${JSON.stringify(args)} should fail, got: ${JSON.stringify(result)}`)
  const msg = text(result)
  assert.ok(msg.trim().length > 0, `${name}: empty error message`)
  return msg
}

// sandboxIds pulls the sandbox ids out of a sandbox_list result.
export function sandboxIds(listed) {
  const arr = Array.isArray(listed) ? listed : listed.sandboxes ?? listed.items ?? []
  assert.ok(Array.isArray(arr), `sandbox_list: no list in ${JSON.stringify(listed)}`)
  return arr.map((s) => s.sandbox_id ?? s.sandboxId ?? s.id)
}

// run runs main and exits non-zero on any failure (with the stack).
export function run(main) {
  main().then(
    () => process.exit(0),
    (err) => {
      console.error('FAIL:', err?.stack ?? err)
      if (err?.cause) console.error('cause:', err.cause)
      process.exit(1)
    },
  )
}
