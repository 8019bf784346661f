// Drives Hutch's web console in Debian's chromium through playwright-core:
// the steps of test/console (console_test.go), which runs this script and
// answers its requests on stdin ("@@go <verb> [arg]" lines on stdout: the
// Go test creates sandboxes through the Go SDK and checks through it).
//
// Environment: HUTCH_URL, KEY_A, KEY_B, SANDBOX_B (key B's sandbox),
// ARTIFACTS (screenshots), CHROMIUM (the browser binary).
import { chromium } from 'playwright-core'
import assert from 'node:assert/strict'
import { ask, screenshots, step, waitTerminalLine } from '../script.mjs'
import { randomBytes } from 'node:crypto'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { tmpdir } from 'node:os'

const url = process.env.HUTCH_URL
const keyA = process.env.KEY_A
const keyB = process.env.KEY_B
const sandboxB = process.env.SANDBOX_B
const artifacts = process.env.ARTIFACTS

const screenshot = screenshots(artifacts)

// Chromium's flags here (docs/console.md): as root it needs --no-sandbox;
// no GPU and a small /dev/shm in containers.
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--headless=new', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run', '--no-default-browser-check'],
})

// Every console message of type error and every uncaught error fails the
// test, but for the browser's own note of an answer the test provokes:
// a 401 of the sign-in with a wrong key (and of the page's first look, not
// yet signed in, at GET /v2/sandboxes?limit=1), and a 404 of sandbox A's
// own paths (key B's visit to it: its info and its logs, asked at once;
// the list's last look at its metrics as it is killed).
// /api-keys and /events answer: a 404 there is a failure.
const problems = []
const expectedNetwork = []
let sandboxA = '' // set once the Go test has made it
function expectedNote (status, resource) {
  let u
  try {
    u = new URL(resource)
  } catch {
    return false
  }
  if (status === '401') return u.pathname === '/console/session' || (u.pathname === '/v2/sandboxes' && u.search === '?limit=1')
  return sandboxA !== '' && [`/sandboxes/${sandboxA}`, `/v2/sandboxes/${sandboxA}/logs`].some((p) => u.pathname === p || u.pathname.startsWith(p + '/'))
}
function watch (page, who) {
  page.on('console', (msg) => {
    if (msg.type() !== 'error' && msg.type() !== 'warning') return
    const text = msg.text()
    const m = /^Failed to load resource: the server responded with a status of (401|404)\b/.exec(text)
    if (msg.type() === 'error' && m && expectedNote(m[1], msg.location().url)) {
      expectedNetwork.push(`${who}: ${text} (${msg.location().url})`)
      return
    }
    problems.push(`${who} console.${msg.type()}: ${text} at ${msg.location().url}`)
  })
  page.on('pageerror', (err) => problems.push(`${who} page error: ${err.stack || err}`))
}

async function signIn (page, key) {
  await page.goto(url + '/')
  await page.waitForSelector('form.signin input[name=apiKey]')
  await page.fill('form.signin input[name=apiKey]', key)
  await page.click('form.signin button[type=submit]')
}

const ctxA = await browser.newContext({ viewport: { width: 1280, height: 900 }, acceptDownloads: true })
// The keys page's Copy button writes the new key to the clipboard.
await ctxA.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: url })
const page = await ctxA.newPage()
watch(page, 'A')

step('a wrong key is refused: an error, no cookie')
await signIn(page, 'e2b_00000000000000000000000000000000deadbeef')
await page.waitForSelector('.signin-error .error')
assert.match(await page.textContent('.signin-error'), /invalid API key/)
assert.deepEqual(await ctxA.cookies(), [], 'a refused sign-in left a cookie')
await screenshot(page, 'wrong-key-refused')

step('sign in with key A: the cookie is HttpOnly, Secure, SameSite=Strict')
await page.fill('form.signin input[name=apiKey]', keyA)
await page.click('form.signin button[type=submit]')
await page.waitForSelector('nav >> text=Sandboxes')
const cookies = await ctxA.cookies()
assert.equal(cookies.length, 1, JSON.stringify(cookies))
assert.equal(cookies[0].name, '__Host-hutch_console')
assert.ok(cookies[0].httpOnly && cookies[0].secure && cookies[0].sameSite === 'Strict', JSON.stringify(cookies[0]))
assert.equal(await page.evaluate(() => document.cookie), '', 'the page can read the cookie')
assert.ok(!page.url().includes(keyA), 'the key is in the URL')
await page.waitForSelector('table.sandboxes, .empty')
await screenshot(page, 'signed-in')

step('a sandbox created through the Go SDK appears')
sandboxA = await ask('create')
const rowA = `tr[data-sandbox="${sandboxA}"]`
await page.waitForSelector(rowA, { timeout: 30_000 })
assert.equal(await page.locator(`tr[data-sandbox="${sandboxB}"]`).count(), 0, "key B's sandbox is listed for key A")
assert.match(await page.textContent(rowA), /running/)
// The metadata filter finds it, and a filter that matches nothing hides it.
await page.fill('input[name=metadata]', 'suite=nothing')
await page.click('form.filters button[type=submit]')
await page.waitForSelector('.empty')
await page.fill('input[name=metadata]', 'suite=console')
await page.click('form.filters button[type=submit]')
await page.waitForSelector(rowA)
await screenshot(page, 'sandbox-appears')

step("another key's sandboxes are not visible")
const ctxB = await browser.newContext({ viewport: { width: 1280, height: 900 } })
const pageB = await ctxB.newPage()
watch(pageB, 'B')
await signIn(pageB, keyB)
await pageB.waitForSelector(`tr[data-sandbox="${sandboxB}"]`, { timeout: 30_000 })
assert.equal(await pageB.locator(`tr[data-sandbox="${sandboxA}"]`).count(), 0, "key A's sandbox is listed for key B")
await screenshot(pageB, 'other-key')
// Key B cannot open A's sandbox either: the API answers 404.
await pageB.goto(url + `/#/sandboxes/${sandboxA}`)
await pageB.waitForSelector('.gone')

step('key B, a user key: the keys page shows only B, and no way to make keys')
await pageB.goto(url + '/#/keys')
await pageB.waitForSelector('table.keys tbody tr')
const rowsB = await pageB.$$eval('table.keys tbody tr', (trs) => trs.map((tr) => ({ id: tr.dataset.key, text: tr.textContent })))
assert.equal(rowsB.length, 1, `key B sees ${rowsB.length} keys: ${JSON.stringify(rowsB)}`)
assert.match(rowsB[0].text, /console-b/)
assert.match(rowsB[0].text, /this key/)
assert.match(rowsB[0].text, /user/)
const keyBID = rowsB[0].id
assert.equal(await pageB.locator('form.create-key').count(), 0, 'a user key is offered a form to make keys')
assert.match(await pageB.textContent('.no-create'), /Only an admin key makes API keys/)
await screenshot(pageB, 'keys-user')
// Its audit page holds only its own events.
await pageB.goto(url + '/#/audit')
await pageB.waitForSelector('table.events tbody tr')
const keysSeenByB = await pageB.$$eval('table.events tbody tr td:nth-child(3)', (tds) => [...new Set(tds.map((td) => td.textContent))])
assert.deepEqual(keysSeenByB, [keyBID], "key B's audit page shows other keys' events")
await screenshot(pageB, 'audit-user')
await ctxB.close()

step('open its terminal, echo, see the output')
await page.click(`${rowA} a.sandbox-link`)
await page.waitForSelector('.info .badge')
await page.click('button.tab-terminal')
await page.waitForFunction(() => /connected/.test(document.querySelector('.term-status')?.textContent ?? ''), null, { timeout: 30_000 })
const waitLine = (re, what) => waitTerminalLine(page, re, what)
await page.click('.terminal')
await page.keyboard.type('echo hello-console\n')
await waitLine(/^hello-console$/, 'output hello-console')
await screenshot(page, 'terminal-echo')

step('resize: the PTY follows the window')
const rowsBefore = await page.locator('.xterm-rows > div').count()
await page.keyboard.type('stty size | sed "s/^/SIZE1 /"\n')
const size1 = (await waitLine(/^SIZE1 \d+ \d+$/, 'stty size')).split(' ').slice(1).map(Number)
assert.equal(size1[0], rowsBefore, `stty rows ${size1[0]}, terminal rows ${rowsBefore}`)
await page.setViewportSize({ width: 900, height: 900 })
await page.waitForFunction((cols) => {
  const m = document.querySelector('.xterm-helper-textarea')
  return m && document.querySelector('.xterm-rows') && cols > 0
}, size1[1])
await page.waitForTimeout(500)
await page.keyboard.type('stty size | sed "s/^/SIZE2 /"\n')
const size2 = (await waitLine(/^SIZE2 \d+ \d+$/, 'stty size after the resize')).split(' ').slice(1).map(Number)
assert.ok(size2[1] < size1[1], `columns ${size1[1]} -> ${size2[1]}: the PTY did not follow a narrower window`)
await screenshot(page, 'terminal-resized')
await page.setViewportSize({ width: 1280, height: 900 })

step('upload a file with progress, see it listed, download it, same bytes')
await page.click('button.tab-files')
await page.waitForSelector('table.files')
const name = `upload-${randomBytes(4).toString('hex')}.bin`
const local = join(tmpdir(), name)
const content = randomBytes(3 << 20)
writeFileSync(local, content)
// Record each progress value the page shows.
await page.evaluate(() => {
  window.__progress = []
  const p = document.querySelector('.upload-progress')
  new MutationObserver(() => window.__progress.push(p.value)).observe(p, { attributes: true })
  const orig = Object.getOwnPropertyDescriptor(HTMLProgressElement.prototype, 'value')
  Object.defineProperty(p, 'value', { get () { return orig.get.call(this) }, set (v) { window.__progress.push(v); orig.set.call(this, v) } })
})
await page.setInputFiles('input[type=file]', local)
await page.waitForFunction((n) => (document.querySelector('.upload-status')?.textContent ?? '').includes(`uploaded /home/user/${n}`), name, { timeout: 30_000 })
await page.waitForSelector(`tr[data-name="${name}"]`)
const progress = await page.evaluate(() => window.__progress)
assert.equal(progress[progress.length - 1], 100, `progress ${progress}`)
assert.ok(progress.some((v) => v > 0 && v < 100) || progress.length >= 2, `no progress shown: ${progress}`)
await screenshot(page, 'file-uploaded')
const [download] = await Promise.all([
  page.waitForEvent('download'),
  page.click(`a.file[data-path="/home/user/${name}"]`),
])
const got = readFileSync(await download.path())
assert.ok(got.equals(content), `downloaded ${got.length} bytes, uploaded ${content.length}: not the same`)
assert.equal(download.suggestedFilename(), name)

step("activity: what envd ran — the terminal's shell in a PTY, the upload's file.write")
const api = async (method, path, body, key = keyA) => {
  const r = await fetch(url + path, { method, headers: { 'X-API-KEY': key, 'Content-Type': 'application/json' }, body: body && JSON.stringify(body) })
  const text = await r.text()
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${text}`)
  return text ? JSON.parse(text) : null
}
await page.click('button.tab-activity')
const shellStart = '.activity .event[data-action="command.start"]'
await page.waitForFunction((sel) => [...document.querySelectorAll(sel)].some((e) => /\/bin\/bash -i -l \(pty\)/.test(e.textContent)), shellStart, { timeout: 15_000 })
await page.waitForFunction((p) => [...document.querySelectorAll('.activity .event[data-action="file.write"]')].some((e) => e.textContent.includes(p)), `/home/user/${name}`, { timeout: 15_000 })
// What the page shows is what the trail holds: detail.pty is true.
const trail = await api('GET', `/events?sandboxID=${sandboxA}&kind=command&limit=1000`)
assert.ok(trail.some((e) => e.action === 'command.start' && e.detail.pty === true && e.detail.cmd === '/bin/bash -i -l'), `no PTY shell in the trail: ${JSON.stringify(trail)}`)
// Newest first, and it grows as it happens: a command run through the SDK
// while the tab is open comes on top, with its exit code, no reload.
const seqs = await page.$$eval('.activity .event', (es) => es.map((e) => Number(e.dataset.seq)))
assert.deepEqual(seqs, [...seqs].sort((x, y) => y - x), `activity not newest first: ${seqs}`)
const marker = `activity-live-${randomBytes(3).toString('hex')}`
assert.equal(await ask('run', `${sandboxA} echo ${marker}; exit 3`), 'exit 3')
await page.waitForFunction((m) => {
  const top = document.querySelector('.activity .event')
  return top?.dataset.action === 'command.end' && top.textContent.includes(m) && /exit 3/.test(top.textContent) && /\berror\b/.test(top.textContent)
}, marker, { timeout: 15_000 }).catch(async (err) => {
  await screenshot(page, 'activity-failed')
  throw new Error(`${err.message}\nactivity: ${await page.textContent('.activity')}`)
})
await page.waitForSelector('.logs .log', { timeout: 30_000 }) // envd's own lines stay, below
await screenshot(page, 'sandbox-activity')

step('a template build: its log lines appear as they stream')
const tname = `console-build-${randomBytes(3).toString('hex')}`
await ask('template', tname) // removed when the test ends
const { templateID, buildID } = await api('POST', '/v3/templates', { name: tname })
await api('POST', `/v2/templates/${templateID}/builds/${buildID}`, {
  fromTemplate: 'base',
  // A step of its own each run (the name in it): never one from the
  // build cache, whose log would come at once.
  steps: [{ type: 'RUN', args: [`: ${tname}; for i in 1 2 3 4 5 6 7 8; do echo console-build-line-$i; sleep 1; done`] }],
})
await page.goto(url + '/#/templates')
await page.fill('input[name=templateID]', templateID)
await page.fill('input[name=buildID]', buildID)
await page.click('form.watch-build button[type=submit]')
await page.waitForFunction(() => /console-build-line-1\b/.test(document.querySelector('.build-log')?.textContent ?? ''), null, { timeout: 90_000 })
const early = await page.textContent('.build-log')
assert.ok(!early.includes('console-build-line-8'), 'the whole log came at once: it did not stream')
assert.equal(await page.textContent('.build-status'), 'building')
await screenshot(page, 'build-streaming')
await page.waitForFunction(() => document.querySelector('.build-status')?.textContent === 'ready', null, { timeout: 120_000 })
assert.match(await page.textContent('.build-log'), /console-build-line-8/)
await screenshot(page, 'build-ready')
await page.goto(url + '/#/templates')
await page.waitForSelector(`tr[data-template="${templateID}"]`)
await screenshot(page, 'templates')
// The build's layers and their sizes: base's and the RUN step's, as the
// API lists them.
await page.click(`tr[data-template="${templateID}"] a`)
await page.waitForSelector('td.layers details')
const apiLayers = (await api('GET', `/templates/${templateID}`)).builds[0].layers
assert.ok(apiLayers.length >= 2, `the build has ${apiLayers.length} layers, want base's and its step's`)
await page.click('td.layers summary')
const shown = await page.$$eval('td.layers li', (lis) => lis.map((li) => li.getAttribute('data-layer')))
assert.deepEqual(shown, apiLayers.map((l) => l.id), 'the layers shown are not the API\'s')
const total = apiLayers.reduce((n, l) => n + l.sizeBytes, 0)
assert.ok(total > 0, 'the layers have no size')
assert.match(await page.textContent('td.layers summary'), new RegExp(`^${apiLayers.length} · \\d`))
await screenshot(page, 'template-layers')

step('set its timeout, pause and resume it from the console')
await page.goto(url + '/#/sandboxes')
await page.waitForSelector(rowA)
await page.fill(`${rowA} input.timeout`, '1800')
await page.click(`${rowA} button.set-timeout`)
// The fifth cell is the time left.
await page.waitForFunction((sel) => /^(29|30)m$/.test(document.querySelector(`${sel} td:nth-child(5)`)?.textContent ?? ''), rowA, { timeout: 15_000 }).catch(async (err) => {
  await screenshot(page, 'set-timeout-failed')
  throw new Error(`${err.message}\nrow: ${await page.textContent(rowA)}\npage: ${await page.textContent('main')}`)
})
await page.click(`${rowA} button.pause`)
await page.waitForSelector(`${rowA}.state-paused`, { timeout: 60_000 })
await screenshot(page, 'sandbox-paused')
await page.click(`${rowA} button.resume`)
await page.waitForSelector(`${rowA}.state-running`, { timeout: 60_000 })

step('kill the sandbox from the console: it leaves the list, the SDK sees 404')
await page.click(`${rowA} button.kill`)
await page.click(`${rowA} button.kill`)
await page.waitForSelector(rowA, { state: 'detached', timeout: 30_000 })
assert.equal(await ask('gone', sandboxA), 'gone')
await screenshot(page, 'sandbox-killed')

step('keys (admin key A): every key with its role; make one, shown once, that works; revoke it')
// status is what the API answers a request made with key.
const status = async (key) => (await fetch(url + '/v2/sandboxes?limit=1', { headers: { 'X-API-KEY': key } })).status
await page.goto(url + '/#/keys')
await page.waitForSelector(`table.keys tr[data-key="${keyBID}"]`)
assert.match(await page.textContent(`tr[data-key="${keyBID}"]`), /console-b.*user/)
assert.match(await page.textContent('table.keys tr:has(.badge.current)'), /admin/)
await page.fill('form.create-key input[name=name]', 'console-made')
await page.selectOption('form.create-key select[name=role]', 'user')
await page.click('form.create-key button[type=submit]')
await page.waitForSelector('.new-key input.secret')
const secret = await page.inputValue('.new-key input.secret')
const madeID = await page.getAttribute('.new-key', 'data-key')
assert.match(secret, /^e2b_/)
await page.waitForSelector(`table.keys tr[data-key="${madeID}"].active`)
await page.click('.new-key button.copy')
await page.waitForFunction(() => document.querySelector('.new-key .copied')?.textContent === 'copied')
assert.equal(await page.evaluate(() => navigator.clipboard.readText()), secret, 'Copy did not copy the key')
assert.equal(await status(secret), 200, 'the new key does not work')
await screenshot(page, 'key-created')
// Shown once: after a navigation the page has it nowhere.
await page.goto(url + '/#/sandboxes')
await page.goto(url + '/#/keys')
await page.waitForSelector(`table.keys tr[data-key="${madeID}"]`)
assert.equal(await page.locator('.new-key').count(), 0, 'the new key is shown again')
assert.ok(!(await page.content()).includes(secret), 'the secret is still in the page')
// Revoke: the first click only asks.
const revoke = `table.keys tr[data-key="${madeID}"] button.revoke`
await page.click(revoke)
assert.equal(await page.textContent(revoke), 'Really revoke?')
assert.equal(await status(secret), 200, 'one click revoked the key')
await page.click(revoke)
await page.waitForSelector(`table.keys tr[data-key="${madeID}"].revoked`)
assert.match(await page.textContent(`tr[data-key="${madeID}"] .revoked-at`), /revoked/)
assert.equal(await status(secret), 401, 'the revoked key still works')
await screenshot(page, 'key-revoked')

step('audit: newest first, growing live; the sandbox\'s create and kill; filter by kind')
await page.goto(url + '/#/audit')
await page.waitForSelector('table.events tbody tr')
const auditSeqs = await page.$$eval('table.events tbody tr', (trs) => trs.map((tr) => Number(tr.dataset.seq)))
assert.deepEqual(auditSeqs, [...auditSeqs].sort((x, y) => y - x), `audit not newest first: ${auditSeqs}`)
// A new event comes on top without a reload (an MCP tool call reported as
// hutch mcp does).
const tool = `console__live_${randomBytes(3).toString('hex')}`
await api('POST', '/events', { kind: 'mcp', action: 'tool.call', outcome: 'ok', detail: { tool } })
await page.waitForFunction((t) => [...document.querySelectorAll('table.events tbody tr')].slice(0, 3).some((tr) => tr.textContent.includes(t)), tool, { timeout: 10_000 })
await screenshot(page, 'audit-live')
await page.fill('form.filters input[name=sandboxID]', sandboxA)
await page.click('form.filters button[type=submit]')
await page.waitForSelector(`table.events tr[data-action="sandbox.kill"]`)
await page.waitForSelector(`table.events tr[data-action="sandbox.create"]`)
const sandboxes = await page.$$eval('table.events tbody tr td:nth-child(4)', (tds) => [...new Set(tds.map((td) => td.textContent))])
assert.deepEqual(sandboxes, [sandboxA], `filtered by sandbox, the page shows ${sandboxes}`)
await screenshot(page, 'audit-sandbox')
await page.fill('form.filters input[name=sandboxID]', '')
await page.selectOption('form.filters select[name=kind]', 'command')
await page.click('form.filters button[type=submit]')
await page.waitForSelector('table.events tbody tr[data-kind="command"]')
const kinds = await page.$$eval('table.events tbody tr', (trs) => [...new Set(trs.map((tr) => tr.dataset.kind))])
assert.deepEqual(kinds, ['command'], `filtered by kind=command, the page shows ${kinds}`)
await screenshot(page, 'audit-commands')

step('sign out: the cookie goes')
await page.click('button.signout')
await page.waitForSelector('form.signin')
assert.deepEqual((await ctxA.cookies()).filter((c) => c.name === '__Host-hutch_console'), [])
await screenshot(page, 'signed-out')

await browser.close()
console.log(`expected network notes:\n  ${expectedNetwork.join('\n  ') || '(none)'}`)
assert.deepEqual(problems, [], 'console errors or page errors')
console.log('console: all steps passed')
process.exit(0)
