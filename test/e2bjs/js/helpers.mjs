// Shared helpers for the E2B JS SDK end-to-end tests. The Go test in
// test/e2bjs starts a real sandbox and points E2B_SANDBOX_URL at its envd.
import { randomBytes } from 'node:crypto'
import { Sandbox } from 'e2b'

export const HOME = '/home/user'

// connect returns an SDK sandbox. With E2B_API_KEY set it is a real one,
// created through `hutch serve` at E2B_API_URL / E2B_SANDBOX_URL, or at
// https://api.<E2B_DOMAIN> and https://<port>-<id>.<E2B_DOMAIN>; otherwise
// debug mode (no control plane) talks to the envd at E2B_SANDBOX_URL.
export async function connect() {
  const sandboxUrl = process.env.E2B_SANDBOX_URL
  if (!sandboxUrl && !process.env.E2B_DOMAIN) {
    throw new Error('neither E2B_SANDBOX_URL nor E2B_DOMAIN is set: run these tests through `go test ./test/e2bjs`')
  }
  if (process.env.E2B_API_KEY) {
    return Sandbox.create({ timeoutMs: 10 * 60_000 })
  }
  return Sandbox.create({ debug: true, sandboxUrl })
}

// throughServe is true when the tests run against `hutch serve`.
export const throughServe = !!process.env.E2B_API_KEY

// runtime is the runtime backend the server runs sandboxes on (its
// --runtime), which Hutch adds to every sandbox's metadata as
// hutch.runtime.
export const runtime = process.env.HUTCH_RUNTIME || 'native'

// withRuntime is metadata as Hutch reports it: with hutch.runtime.
export const withRuntime = (md) => ({ ...md, 'hutch.runtime': runtime })

// unique returns a name no other test (or test file running in parallel)
// uses.
export function unique(prefix) {
  return `${prefix}-${randomBytes(6).toString('hex')}`
}

// waitFor polls cond until it returns a truthy value or timeoutMs passes.
// what describes the condition; a function is called only on failure, so it
// can show the state at that time.
export async function waitFor(cond, timeoutMs = 10_000, what = 'condition') {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const v = await cond()
    if (v) return v
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${typeof what === 'function' ? what() : what}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
