// What the console's browser scripts (js/console.mjs for Chromium,
// firefox/firefox.mjs for Firefox) share: their requests to the Go test
// that runs them (script_test.go answers "@@go <verb> [arg]" lines on
// stdout with one line each on stdin), screenshots and step marks.
// Node's built-ins only: each script's package has its own browser
// driver.
import { createInterface } from 'node:readline'
import { mkdirSync } from 'node:fs'
import { join } from 'node:path'

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]()

/** ask sends the Go test a request and returns its answer. */
export async function ask (verb, arg = '') {
  console.log(`@@go ${verb} ${arg}`.trim())
  const { value, done } = await lines.next()
  if (done) throw new Error(`no answer to ${verb}`)
  if (value.startsWith('error ')) throw new Error(`${verb}: ${value}`)
  return value
}

/** screenshots returns a function that saves numbered screenshots of a page under dir. */
export function screenshots (dir) {
  mkdirSync(dir, { recursive: true })
  let shot = 0
  return async (page, name) => {
    shot++
    const file = join(dir, `${String(shot).padStart(2, '0')}-${name}.png`)
    await page.screenshot({ path: file, fullPage: true })
    console.log(`screenshot ${file}`)
  }
}

/** step marks the start of a step in the log. */
export function step (what) { console.log(`== ${what}`) }

/**
 * waitTerminalLine waits (20 s at most) for a line of the console's
 * terminal on page that matches re, and returns it; what names it in the
 * error. page is Playwright's or Puppeteer's: both evaluate a function.
 */
export async function waitTerminalLine (page, re, what) {
  const rows = () => page.evaluate(() => [...document.querySelectorAll('.xterm-rows > div')].map((d) => d.textContent.replace(/\u00a0/g, ' ').trimEnd()))
  const deadline = Date.now() + 20_000
  for (;;) {
    const now = await rows()
    const hit = now.find((r) => re.test(r))
    if (hit) return hit
    if (Date.now() > deadline) throw new Error(`terminal: no ${what}:\n${now.join('\n')}`)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}
