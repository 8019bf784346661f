// Preloaded into supergateway (NODE_OPTIONS=--require) by bench/mcpgateway:
// supergateway 4.0.0 has no host flag and listens on every interface
// (app.listen(port)); this pins a listen without a host to 127.0.0.1, so the
// benchmark's servers are reachable from loopback only. It then removes
// itself from NODE_OPTIONS, so the MCP server processes supergateway spawns
// start exactly as they would without it.
'use strict'
const net = require('net')
const listen = net.Server.prototype.listen
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === 'number' || (typeof args[0] === 'string' && /^\d+$/.test(args[0]))) {
    if (typeof args[1] !== 'string') {
      args.splice(1, 0, '127.0.0.1')
    }
  } else if (args[0] && typeof args[0] === 'object' && args[0].port !== undefined && !args[0].host) {
    args[0] = { ...args[0], host: '127.0.0.1' }
  }
  return listen.apply(this, args)
}
delete process.env.NODE_OPTIONS
