// Drives Hutch's web console in Debian's firefox-esr through puppeteer-core
// over WebDriver BiDi (Firefox's own remote agent: no Playwright build, no
// geckodriver): a smoke run of the console's main paths, for
// TestConsoleFirefox (test/console/firefox_test.go), which runs this script
// and answers its requests on stdin ("@@go <verb> [arg]" lines on stdout,
// as js/console.mjs does: the Go test creates sandboxes through the Go SDK
// and checks through it).
//
// Environment: HUTCH_URL, KEY_A, ARTIFACTS (screenshots), FIREFOX (the
// browser binary).
import puppeteer from 'puppeteer-core'
import assert from 'node:assert/strict'
import { ask, screenshots, step, waitTerminalLine } from '../script.mjs'
import { randomBytes } from 'node:crypto'
import { rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { tmpdir } from 'node:os'

const url = process.env.HUTCH_URL
const keyA = process.env.KEY_A
const artifacts = process.env.ARTIFACTS

const screenshot = screenshots(artifacts)

// Firefox's preferences (docs/console.md): puppeteer-core writes its own
// automation preferences into a fresh temporary profile (no updates, no
// first-run pages, no telemetry, Remote Settings and Safe Browsing off)
// and adds these: Firefox's own captive-portal and connectivity checks go
// nowhere either, as the machine reaches no such servers. Nothing here
// touches cookies or secure contexts: Firefox keeps the console's Secure
// __Host- cookie on http://127.0.0.1 by itself, which the test checks.
const prefs = {
  'network.captive-portal-service.enabled': false,
  'network.connectivity-service.enabled': false,
}

const browser = await puppeteer.launch({
  browser: 'firefox',
  protocol: 'webDriverBiDi',
  executablePath: process.env.FIREFOX || '/usr/bin/firefox-esr',
  headless: true,
  extraPrefsFirefox: prefs,
  defaultViewport: { width: 1280, height: 900 },
})
console.log(`browser ${await browser.version()}`)

// Every console message of type error or warning and every uncaught error
// fails the test, but for the browser's own note of an answer the test
// expects (a 401 for the wrong key, a 404 for the sandbox just killed), as
// js/console.mjs allows Chromium's "Failed to load resource" lines.
// Firefox, unlike Chromium, does not report a fetch's 4xx answer as a
// console message at all, so this list stays empty there.
const problems = []
const expectedNetwork = []
function watch (page, who) {
  page.on('console', (msg) => {
    const type = msg.type()
    const text = msg.text()
    if (type !== 'error' && type !== 'warn' && type !== 'warning') {
      console.log(`${who} console.${type}: ${text}`)
      return
    }
    if (type === 'error' && /^Failed to load resource: the server responded with a status of (401|404)\b/.test(text)) {
      expectedNetwork.push(`${who}: ${text} (${msg.location().url})`)
      return
    }
    problems.push(`${who} console.${type}: ${text} at ${msg.location().url}`)
  })
  page.on('pageerror', (err) => problems.push(`${who} page error: ${err.stack || err}`))
}

const page = await browser.newPage()
watch(page, 'A')

async function signIn (key) {
  const input = 'form.signin input[name=apiKey]'
  await page.waitForSelector(input)
  await page.$eval(input, (el) => { el.value = '' })
  await page.type(input, key)
  await page.click('form.signin button[type=submit]')
}

const consoleCookies = async () => (await browser.cookies()).filter((c) => c.name === '__Host-hutch_console')
const text = (sel) => page.$eval(sel, (el) => el.textContent)

step("the watch sees Firefox's errors: console.error, a throw, the CSP refusing an inline script")
// Over BiDi Firefox reports console.* calls and every error its console
// gets for the page (nsIScriptError, Firefox's own included), not its own
// warnings. Provoke one of each kind, see them caught, then start clean:
// a run that reports nothing has looked.
await page.goto(url + '/')
await page.waitForSelector('form.signin')
await page.evaluate(() => {
  console.error('hutch-probe-console-error')
  setTimeout(() => { throw new Error('hutch-probe-throw') })
  const s = document.createElement('script')
  s.textContent = 'window.__inline = 1'
  document.body.append(s)
})
const probes = [/console\.error: hutch-probe-console-error/, /page error: [^]*hutch-probe-throw/, /page error: [^]*Content-Security-Policy[^]*inline script/]
for (let deadline = Date.now() + 10_000; !probes.every((re) => problems.some((p) => re.test(p)));) {
  if (Date.now() > deadline) throw new Error(`the watch missed a probe: ${JSON.stringify(problems)}`)
  await new Promise((resolve) => setTimeout(resolve, 100))
}
assert.equal(await page.evaluate(() => window.__inline), undefined, 'an inline script ran despite the CSP')
problems.length = 0

step('a wrong key is refused: an error, no cookie')
await signIn('e2b_00000000000000000000000000000000deadbeef')
await page.waitForSelector('.signin-error .error')
assert.match(await text('.signin-error'), /invalid API key/)
assert.deepEqual(await consoleCookies(), [], 'a refused sign-in left a cookie')
await screenshot(page, 'wrong-key-refused')

step('sign in with key A: Firefox keeps the __Host- cookie on http://127.0.0.1')
await signIn(keyA)
await page.waitForSelector('nav a[href="#/sandboxes"]')
const cookies = await consoleCookies()
assert.equal(cookies.length, 1, `no console cookie: Firefox dropped it? ${JSON.stringify(await browser.cookies())}`)
assert.ok(cookies[0].httpOnly && cookies[0].secure && cookies[0].sameSite === 'Strict', JSON.stringify(cookies[0]))
assert.equal(await page.evaluate(() => document.cookie), '', 'the page can read the cookie')
assert.ok(!page.url().includes(keyA), 'the key is in the URL')
await page.waitForSelector('table.sandboxes, .empty')
await screenshot(page, 'signed-in')

step('a sandbox created through the Go SDK appears')
const sandboxA = await ask('create')
const rowA = `tr[data-sandbox="${sandboxA}"]`
await page.waitForSelector(rowA, { timeout: 30_000 })
assert.match(await text(rowA), /running/)
await screenshot(page, 'sandbox-appears')

step('open it; its terminal runs echo and shows the output')
await page.click(`${rowA} a.sandbox-link`)
await page.waitForSelector('.info .badge')
await page.click('button.tab-terminal')
await page.waitForFunction(() => /connected/.test(document.querySelector('.term-status')?.textContent ?? ''), { timeout: 30_000 })
const waitLine = (re, what) => waitTerminalLine(page, re, what)
await page.click('.terminal')
await page.keyboard.type('echo hello-firefox\n')
await waitLine(/^hello-firefox$/, 'output hello-firefox')
await screenshot(page, 'terminal-echo')

step('upload a small file and see it listed')
await page.click('button.tab-files')
await page.waitForSelector('table.files')
const name = `upload-${randomBytes(4).toString('hex')}.txt`
const local = join(tmpdir(), name)
writeFileSync(local, `hello from firefox ${name}\n`)
try {
  const input = await page.$('input[type=file]')
  await input.uploadFile(local)
  await page.waitForFunction((n) => (document.querySelector('.upload-status')?.textContent ?? '').includes(`uploaded /home/user/${n}`), { timeout: 30_000 }, name)
  await page.waitForSelector(`tr[data-name="${name}"]`)
} finally {
  rmSync(local, { force: true })
}
await screenshot(page, 'file-uploaded')

step('kill the sandbox from the console: it leaves the list, the SDK sees 404')
await page.goto(url + '/#/sandboxes')
await page.waitForSelector(rowA)
// Kill asks to be clicked twice.
await page.click(`${rowA} button.kill`)
await page.click(`${rowA} button.kill`)
await page.waitForSelector(rowA, { hidden: true, timeout: 30_000 })
assert.equal(await ask('gone', sandboxA), 'gone')
await screenshot(page, 'sandbox-killed')

step('sign out: the cookie goes')
await page.click('button.signout')
await page.waitForSelector('form.signin')
assert.deepEqual(await consoleCookies(), [])
await screenshot(page, 'signed-out')

await browser.close()
console.log(`expected network notes:\n  ${expectedNetwork.join('\n  ') || '(none)'}`)
assert.deepEqual(problems, [], 'console errors or page errors')
console.log('firefox: all steps passed')
process.exit(0)
