package main

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/hutch-sandbox/hutch/internal/serve"
)

// connFlags are serve's flags for client connections.
type connFlags struct {
	idleTimeout  time.Duration
	stallTimeout time.Duration
	perClient    int
	total        int
}

func (f *connFlags) register(fs *pflag.FlagSet) {
	fs.DurationVar(&f.idleTimeout, "idle-timeout", serve.DefaultIdleTimeout, "close a client's keep-alive connection after it has been idle this long between requests (0: never)")
	fs.DurationVar(&f.stallTimeout, "stall-timeout", serve.DefaultStallTimeout, "end a request whose client has not taken a write of its answer for this long (a client that stopped reading): an HTTP/2 stream is reset, an HTTP/1 connection closed; a pause between writes, however long, is not a stall")
	fs.IntVar(&f.perClient, "max-conns-per-client", serve.DefaultConnsPerClient, "client connections one address (IPv4, or IPv6 /64) may hold open at once, streams and WebSockets included; more are closed as they come, with a 503 when it fits (0: no cap); it caps the address's requests in flight too (HTTP/2 carries many on one connection), more answered 503. Behind a reverse proxy every client is the proxy's address")
	fs.IntVar(&f.total, "max-conns-total", 0, "client connections all addresses together may hold open at once; past it a new one replaces the connection idle longest, or is closed with a 503 when it fits and none is idle (0: a quarter of the open-file limit, RLIMIT_NOFILE, so that clients and their ways into sandboxes leave half of the server's descriptors to itself); it caps requests in flight in all too")
}

// options are the flags' connection options.
func (f *connFlags) options() serve.ConnOptions {
	return serve.ConnOptions{IdleTimeout: f.idleTimeout, StallTimeout: f.stallTimeout, PerClient: f.perClient, Total: f.total}
}
