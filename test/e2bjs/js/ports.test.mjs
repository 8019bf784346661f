// Reaching services inside a sandbox through `hutch serve`, as a user of
// E2B does: by the E2b-Sandbox-Id / E2b-Sandbox-Port headers, or by the
// host the SDK's getHost(port) names; plain HTTP, streaming responses,
// WebSockets, and the edge proxy's 502s. Skipped in debug mode, which has
// no control plane.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import { WebSocket } from 'undici'
import { Sandbox } from 'e2b'
import { throughServe, waitFor } from './helpers.mjs'

const opts = { skip: !throughServe && 'needs hutch serve (E2B_API_KEY)' }
const base = new URL(process.env.E2B_SANDBOX_URL ?? 'http://127.0.0.1:3000')

// A WebSocket echo server written against the standard library only (the
// base template has no websocket package): handshake, then every text
// frame comes back in upper case.
const wsServer = String.raw`
import base64, hashlib, socket, struct, threading
def serve(c):
    req = b''
    while b'\r\n\r\n' not in req:
        req += c.recv(4096)
    key = [l.split(b':', 1)[1].strip() for l in req.split(b'\r\n') if l.lower().startswith(b'sec-websocket-key:')][0]
    acc = base64.b64encode(hashlib.sha1(key + b'258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest())
    c.sendall(b'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ' + acc + b'\r\n\r\n')
    f = c.makefile('rb')
    while True:
        b0, b1 = f.read(2)
        n = b1 & 127
        if n == 126: n = struct.unpack('>H', f.read(2))[0]
        elif n == 127: n = struct.unpack('>Q', f.read(8))[0]
        mask = f.read(4)
        data = bytes(x ^ mask[i % 4] for i, x in enumerate(f.read(n)))
        if b0 & 15 == 8:
            c.sendall(b'\x88\x00'); c.close(); return
        out = data.upper()
        hdr = bytes([0x81, len(out)]) if len(out) < 126 else bytes([0x81, 126]) + struct.pack('>H', len(out))
        c.sendall(hdr + out)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('0.0.0.0', 8765)); s.listen()
while True:
    threading.Thread(target=serve, args=(s.accept()[0],), daemon=True).start()
`

// A server that streams: one line every 100 ms, flushed as it goes.
const streamServer = String.raw`
import http.server, time
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def do_GET(self):
        self.send_response(200); self.send_header('Transfer-Encoding', 'chunked'); self.end_headers()
        for i in range(5):
            line = ('tick %d\n' % i).encode()
            self.wfile.write(b'%x\r\n%s\r\n' % (len(line), line)); self.wfile.flush(); time.sleep(0.1)
        self.wfile.write(b'0\r\n\r\n')
    def do_POST(self):
        body = self.rfile.read(int(self.headers['Content-Length']))
        self.send_response(200); self.send_header('Content-Length', str(len(body))); self.end_headers()
        self.wfile.write(body[::-1])
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(('127.0.0.1', 8001), H).serve_forever()
`

let sbx
before(async () => {
  if (!throughServe) return
  sbx = await Sandbox.create({ timeoutMs: 120_000, allowInternetAccess: false })
  await sbx.files.write('/tmp/www/hello.txt', 'hello from inside the sandbox\n')
  await sbx.files.write('/tmp/ws.py', wsServer)
  await sbx.files.write('/tmp/stream.py', streamServer)
  for (const cmd of ['python3 -m http.server 8000 --directory /tmp/www', 'python3 /tmp/ws.py', 'python3 /tmp/stream.py']) {
    await sbx.commands.run(cmd, { background: true, timeoutMs: 0 })
  }
  for (const port of [8000, 8765, 8001]) {
    await waitFor(async () => (await sbx.commands.run(`(exec 3<>/dev/tcp/127.0.0.1/${port}) 2>/dev/null && echo up || true`)).stdout === 'up\n', 10_000, `port ${port}`)
  }
})
after(async () => { if (sbx) await sbx.kill() })

// get sends a request to the sandbox's port through hutch serve, naming
// the sandbox with a Host header (as DNS for *.<domain> would).
function get(host, path, { method = 'GET', body, headers = {} } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: base.hostname, port: base.port, path, method, headers: { Host: host, ...headers } }, (res) => {
      let data = ''
      res.setEncoding('utf8')
      res.on('data', (c) => { data += c })
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: data }))
    })
    req.on('error', reject)
    req.end(body)
  })
}

test('a port reached by the SDK host and by the routing headers', opts, async () => {
  const host = sbx.getHost(8000)
  assert.equal(host, `8000-${sbx.sandboxId}.${sbx.sandboxDomain}`)
  const byHost = await get(host, '/hello.txt')
  assert.equal(byHost.status, 200)
  assert.equal(byHost.body, 'hello from inside the sandbox\n')

  const byHeaders = await fetch(new URL('/hello.txt', base), { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8000' } })
  assert.equal(byHeaders.status, 200)
  assert.equal(await byHeaders.text(), 'hello from inside the sandbox\n')
})

test('request bodies go in and streamed responses come out as they are made', opts, async () => {
  const host = sbx.getHost(8001)
  const echo = await get(host, '/', { method: 'POST', body: 'abcdef', headers: { 'Content-Length': '6' } })
  assert.equal(echo.body, 'fedcba')

  const res = await fetch(new URL('/', base), { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8001' } })
  const reader = res.body.getReader()
  const start = Date.now()
  const first = await reader.read()
  const firstAt = Date.now() - start
  let rest = ''
  for (let r = await reader.read(); !r.done; r = await reader.read()) rest += new TextDecoder().decode(r.value)
  const total = Date.now() - start
  assert.equal(new TextDecoder().decode(first.value) + rest, 'tick 0\ntick 1\ntick 2\ntick 3\ntick 4\n')
  // The first line arrives before the server has written the last one:
  // the proxy does not buffer the response.
  assert.ok(firstAt < total, `first chunk after ${firstAt} ms, whole body after ${total} ms`)
  assert.ok(!new TextDecoder().decode(first.value).includes('tick 4'), 'the response came in one piece')
})

test('WebSocket upgrades pass through, both ways', opts, async () => {
  const url = `ws://${base.host}/`
  const ws = new WebSocket(url, { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8765' } })
  const got = []
  const closed = new Promise((resolve) => ws.addEventListener('close', resolve))
  await new Promise((resolve, reject) => {
    ws.addEventListener('open', resolve)
    ws.addEventListener('error', (e) => reject(e.error ?? new Error('websocket error')))
  })
  const replies = new Promise((resolve) => ws.addEventListener('message', (m) => { got.push(m.data); if (got.length === 3) resolve() }))
  ws.send('one'); ws.send('two'); ws.send('x'.repeat(1000))
  await replies
  assert.deepEqual(got, ['ONE', 'TWO', 'X'.repeat(1000)])
  ws.close()
  await closed
})

test('a closed port and a gone sandbox answer the edge proxy 502s', opts, async () => {
  const closed = await get(sbx.getHost(9999), '/')
  assert.equal(closed.status, 502)
  assert.deepEqual(JSON.parse(closed.body), { sandboxId: sbx.sandboxId, message: 'The sandbox is running but port is not open', port: 9999, code: 502 })

  const unknown = await get(`8000-inosuchsandbox0000000.${sbx.sandboxDomain}`, '/')
  assert.equal(unknown.status, 502)
  assert.equal(JSON.parse(unknown.body).sandboxId, 'inosuchsandbox0000000')

  const other = await Sandbox.create({ timeoutMs: 60_000 })
  await other.kill()
  const gone = await get(other.getHost(8000), '/')
  assert.equal(gone.status, 502)
  assert.equal(JSON.parse(gone.body).message, 'The sandbox was not found')
})

test('allowPublicTraffic: false needs the traffic token; maskRequestHost rewrites Host', opts, async () => {
  const priv = await Sandbox.create({ timeoutMs: 60_000, network: { allowPublicTraffic: false, maskRequestHost: 'masked-${PORT}.example' } })
  try {
    assert.ok(priv.trafficAccessToken, 'no traffic access token on a private sandbox')
    // A server that echoes the Host header it got.
    await priv.files.write('/tmp/host.py', String.raw`
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = (self.headers['Host'] + '|' + str(self.headers.get('e2b-traffic-access-token'))).encode()
        self.send_response(200); self.send_header('Content-Length', str(len(body))); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
http.server.HTTPServer(('127.0.0.1', 8080), H).serve_forever()
`)
    await priv.commands.run('python3 /tmp/host.py', { background: true, timeoutMs: 0 })
    await waitFor(async () => (await priv.commands.run('(exec 3<>/dev/tcp/127.0.0.1/8080) 2>/dev/null && echo up || true')).stdout === 'up\n', 10_000, 'port 8080')

    const without = await get(priv.getHost(8080), '/')
    assert.equal(without.status, 403)
    assert.equal(JSON.parse(without.body).code, 403)
    const wrong = await get(priv.getHost(8080), '/', { headers: { 'e2b-traffic-access-token': 'nope' } })
    assert.equal(wrong.status, 403)
    const right = await get(priv.getHost(8080), '/', { headers: { 'e2b-traffic-access-token': priv.trafficAccessToken } })
    assert.equal(right.status, 200)
    // The service sees the masked host and never the token.
    assert.equal(right.body, 'masked-8080.example|None')
    // envd itself is guarded by its own token, not the traffic token.
    assert.equal((await priv.commands.run('echo envd-ok')).stdout, 'envd-ok\n')
    const info = await priv.getInfo()
    assert.equal(info.network?.allowPublicTraffic, false)
    assert.equal(info.network?.maskRequestHost, 'masked-${PORT}.example')
  } finally {
    await priv.kill()
  }
  // A public sandbox needs no token.
  assert.equal(sbx.trafficAccessToken, undefined)
  assert.equal((await get(sbx.getHost(8000), '/hello.txt')).status, 200)
})
