package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/vishvananda/netns"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
	"github.com/hutch-sandbox/hutch/internal/network/policy"
)

// path is one way from a client to the bench server.
type path struct {
	name string
	ns   netns.NsHandle // the client's namespace
	addr string         // the server, ip:port
	// check makes sure the path is what it claims (through the proxy or
	// not) before it is measured.
	check func() error
}

// pathResult is what was measured on one path, over every round.
type pathResult struct {
	name       string
	down, up   []float64 // bytes/s, one per transfer
	conn, open *series
	loaded     *series // open connection, during a download
	cpu        *series // only for CPU busy, over all the path's runs
	err        string
}

// paths measures every path in rounds: each round measures each path in
// turn (the direct pair, the routed trio, then a NAT and a proxied
// sandbox with the default cap, then both again with the cap raised), a
// share of the round trips and one transfer each way. On a machine where
// other work comes and goes, interleaving spreads it over all paths
// instead of loading the one that ran at that moment. A round makes new
// Managers and sandboxes: the cap is a Manager's setting, and one Manager
// runs per namespace.
func (b *bench) paths() []*pathResult {
	var out []*pathResult
	byName := map[string]*pathResult{}
	result := func(name string) *pathResult {
		r, ok := byName[name]
		if !ok {
			r = &pathResult{name: name, conn: &series{}, open: &series{}, loaded: &series{}, cpu: &series{}}
			byName[name] = r
			out = append(out, r)
		}
		return r
	}
	direct, err := b.directPath()
	if err != nil {
		return []*pathResult{{name: "direct veth pair", err: err.Error(), conn: &series{}}}
	}
	routed, err := b.routedPath()
	if err != nil {
		return []*pathResult{{name: "routed", err: err.Error(), conn: &series{}}}
	}
	rounds := b.cfg.tputReps
	perRound := (b.cfg.latN + rounds - 1) / rounds
	for round := 0; round < rounds && b.ctx.Err() == nil; round++ {
		fmt.Printf("round %d/%d: ", round+1, rounds)
		for _, p := range []*path{direct, routed} {
			b.measurePath(p, result(p.name), perRound)
		}
		for _, rate := range []uint64{0, b.cfg.raisedRate} {
			if b.ctx.Err() != nil {
				break
			}
			capName, tag := "cap "+rateName(1e9)+" (default)", "default"
			if rate != 0 {
				capName, tag = "cap raised to "+rateName(rate), "raised"
			}
			// As a restarted serve with another setting would: the new
			// Manager's Start takes over the namespace's table.
			if err := b.w.startManager(rate); err != nil {
				result("Hutch, " + capName).err = err.Error()
				continue
			}
			nat, proxied, done, err := b.sandboxPaths(capName, tag)
			if err != nil {
				result("Hutch, " + capName).err = err.Error()
				continue
			}
			for _, p := range []*path{nat, proxied} {
				b.measurePath(p, result(p.name), perRound)
			}
			done()
		}
		fmt.Println()
	}
	for _, r := range out {
		r.conn.end()
		r.open.end()
		r.loaded.end()
		r.cpu.end()
	}
	return out
}

// directPath is a client and a server namespace joined by one veth pair.
func (b *bench) directPath() (*path, error) {
	cli, err := newNS()
	if err != nil {
		return nil, err
	}
	srv, err := newNS()
	if err != nil {
		return nil, err
	}
	b.w.closers = append(b.w.closers, func() { cli.Close(); srv.Close() })
	if err := vethPair(cli, "eth0", "192.0.2.1/24", srv, "eth0", "192.0.2.2/24"); err != nil {
		return nil, err
	}
	if err := b.w.serveIn(srv, "192.0.2.2:80"); err != nil {
		return nil, err
	}
	return &path{name: "direct veth pair (no Hutch)", ns: cli, addr: "192.0.2.2:80"}, nil
}

// routedPath is a client, a router and a server namespace: two veth pairs
// and IPv4 forwarding, as Hutch's NAT path has, and nothing else.
func (b *bench) routedPath() (*path, error) {
	var nss [3]netns.NsHandle
	for i := range nss {
		var err error
		if nss[i], err = newNS(); err != nil {
			return nil, err
		}
	}
	cli, rtr, srv := nss[0], nss[1], nss[2]
	b.w.closers = append(b.w.closers, func() { cli.Close(); rtr.Close(); srv.Close() })
	if err := vethPair(cli, "eth0", "198.51.100.1/30", rtr, "c0", "198.51.100.2/30"); err != nil {
		return nil, err
	}
	if err := vethPair(rtr, "s0", "198.51.100.5/30", srv, "eth0", "198.51.100.6/30"); err != nil {
		return nil, err
	}
	if err := defaultRoute(cli, "198.51.100.2"); err != nil {
		return nil, err
	}
	if err := defaultRoute(srv, "198.51.100.5"); err != nil {
		return nil, err
	}
	var ferr error
	// /proc/sys/net is the opening thread's namespace's.
	if err := inNS(rtr, func() { ferr = os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644) }); err != nil {
		return nil, err
	}
	if ferr != nil {
		return nil, ferr
	}
	if err := b.w.serveIn(srv, "198.51.100.6:80"); err != nil {
		return nil, err
	}
	return &path{name: "routed: 2 veth pairs + forwarding (no Hutch)", ns: cli, addr: "198.51.100.6:80"}, nil
}

// sandboxPaths attaches two stand-ins with the current Manager: one with
// the default policy (its traffic is forwarded and masqueraded), one with
// a domain rule (its TCP 80 goes to the egress proxy). capName goes into
// the rows' names, tag into the sandboxes' ids. done detaches and stops
// them.
func (b *bench) sandboxPaths(capName, tag string) (nat, proxied *path, done func(), err error) {
	m := b.w.mgr.Load()
	ctx := context.Background()
	var sbs []*standIn
	var nss []netns.NsHandle
	done = func() {
		for _, s := range sbs {
			// Wait for the link to go: the Manager's deleting goroutine
			// must be done before a new Manager replaces this one.
			b.detachWait(m, s.id, nil, nil)
			b.untrack(s)
		}
		for _, ns := range nss {
			ns.Close()
		}
	}
	defer func() {
		if err != nil {
			done()
		}
	}()
	attach := func(id string, p *policy.Egress) (netip.Addr, netns.NsHandle, error) {
		s, err := startStandIn(id, true)
		if err != nil {
			return netip.Addr{}, 0, err
		}
		b.track(s)
		sbs = append(sbs, s)
		a, err := m.Attach(ctx, id, s.pid(), p)
		if err != nil {
			return netip.Addr{}, 0, err
		}
		ns, err := s.netNS()
		if err != nil {
			return netip.Addr{}, 0, err
		}
		nss = append(nss, ns)
		return a.Sandbox, ns, nil
	}
	natAddr, natNS, err := attach("nat-"+tag, defaultPolicy())
	if err != nil {
		return nil, nil, nil, err
	}
	// The E2B way to allow one site only: the domain, and deny all else.
	pp, err := policy.Parse(true, []string{benchName}, []string{"0.0.0.0/0"})
	if err != nil {
		return nil, nil, nil, err
	}
	proxyAddr, proxyNS, err := attach("proxy-"+tag, pp)
	if err != nil {
		return nil, nil, nil, err
	}
	// What the resolver does before it answers the sandbox's lookup of
	// the allowed name: the proxy then accepts the name at this address.
	m.Answered(proxyAddr, benchName, []netip.Addr{proxyServer.Addr()}, time.Hour)

	nat = &path{name: "Hutch NAT, " + capName, ns: natNS, addr: natServer.String(),
		check: func() error { return b.checkProxied(natNS, natAddr, natServer, false) }}
	proxied = &path{name: "Hutch egress proxy, " + capName, ns: proxyNS, addr: proxyServer.String(),
		check: func() error { return b.checkProxied(proxyNS, proxyAddr, proxyServer, true) }}
	return nat, proxied, done, nil
}

// checkProxied makes sure a sandbox's connection to the server does (or
// does not) go through the egress proxy, and, for the proxied one, that
// the proxy judges names: another Host is refused.
func (b *bench) checkProxied(ns netns.NsHandle, client netip.Addr, server netip.AddrPort, want bool) error {
	var err error
	nerr := inNS(ns, func() {
		c, e := openEcho(server.String())
		if e != nil {
			err = e
			return
		}
		defer c.Close()
		// The proxy counts a connection from the accept on.
		if got := b.w.proxy.Conns(client) > 0; got != want {
			err = fmt.Errorf("connection through the egress proxy: %v, want %v", got, want)
			return
		}
		if !want {
			return
		}
		d, e := dial(server.String())
		if e != nil {
			err = e
			return
		}
		defer d.Close()
		d.Write([]byte("GET /ping HTTP/1.1\r\nHost: other.test\r\n\r\n"))
		d.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, _ := bufio.NewReader(d).ReadString('\n')
		if !strings.Contains(line, " 403 ") {
			err = fmt.Errorf("a request for another name through the proxy got %q, want a 403", line)
		}
	})
	if nerr != nil {
		return nerr
	}
	return err
}

// measurePath runs a client process in the path's client namespace —
// n round trips of each kind (new connections, then one open
// connection), one download (with the loaded round trips) and one upload
// — and adds what it measured to r.
func (b *bench) measurePath(p *path, r *pathResult, n int) {
	if b.ctx.Err() != nil || r.err != "" {
		return
	}
	if p.check != nil {
		if err := p.check(); err != nil {
			r.err = err.Error()
			return
		}
	}
	r.cpu.begin()
	c, err := runClient(p.ns, p.addr, n, b.cfg.latWarmup, b.cfg.tputTime)
	r.cpu.pause()
	fmt.Print(".")
	if c == nil {
		r.err = err.Error()
		return
	}
	r.conn.times = append(r.conn.times, c.Conn...)
	r.open.times = append(r.open.times, c.Open...)
	r.loaded.times = append(r.loaded.times, c.Loaded...)
	if c.Failed > 0 {
		r.conn.failed += c.Failed
		if r.conn.firstErr == nil {
			r.conn.firstErr = errors.New(c.FirstErr)
		}
	}
	if c.Down > 0 {
		r.down = append(r.down, c.Down)
	}
	if c.Up > 0 {
		r.up = append(r.up, c.Up)
	}
	if err != nil {
		r.err = err.Error()
	}
}

// median of xs (0 for none).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[(len(s)-1)/2]
}

// printPaths prints the data-path table, each row against the first
// (the direct pair), and what its columns mean.
func printPaths(cfg *config, rows []*pathResult) {
	table := [][]string{{"path", "down Gbit/s", "MB/s", "up Gbit/s", "MB/s",
		"new conn p50", "p95", "p99", "open conn p50", "p95", "p99", "loaded p50", "p99", "CPU busy", "notes"}}
	var base *pathResult
	for _, r := range rows {
		if r.err != "" && len(r.conn.times) == 0 {
			table = append(table, []string{r.name, "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "failed: " + harness.OneLine(r.err)})
			continue
		}
		if base == nil {
			base = r
		}
		down, up := median(r.down), median(r.up)
		var notes []string
		if r.err != "" {
			notes = append(notes, "failed: "+harness.OneLine(r.err))
		}
		for _, s := range []*series{r.conn, r.open, r.loaded} {
			if s.failed > 0 {
				notes = append(notes, fmt.Sprintf("%d round trips failed, first: %s", s.failed, harness.OneLine(fmt.Sprint(s.firstErr))))
			}
		}
		if r != base && len(base.conn.times) > 0 && len(r.conn.times) > 0 && len(r.open.times) > 0 {
			notes = append(notes, fmt.Sprintf("vs direct: %+.0f µs new conn, %+.0f µs open conn (p50)",
				float64(r.conn.pct(.5)-base.conn.pct(.5))/1e3, float64(r.open.pct(.5)-base.open.pct(.5))/1e3))
			if b := median(base.down); b > 0 && down > 0 {
				notes = append(notes, fmt.Sprintf("throughput %.0f%% / %.0f%% of direct", 100*down/b, 100*up/median(base.up)))
			}
		}
		table = append(table, []string{r.name,
			fmt.Sprintf("%.2f", down*8/1e9), fmt.Sprintf("%.0f", down/1e6),
			fmt.Sprintf("%.2f", up*8/1e9), fmt.Sprintf("%.0f", up/1e6),
			us(r.conn.pct(.5)), us(r.conn.pct(.95)), us(r.conn.pct(.99)),
			us(r.open.pct(.5)), us(r.open.pct(.95)), us(r.open.pct(.99)),
			us(r.loaded.pct(.5)), us(r.loaded.pct(.99)),
			fmt.Sprintf("%.0f%%", 100*r.cpu.busy), strings.Join(notes, "; ")})
	}
	printTable(table)
	fmt.Printf("%d rounds, each measuring every path in turn (new Managers and sandboxes each round)\n", cfg.tputReps)
	fmt.Printf("throughput: median of %d transfers of %s each way (one per round), one TCP connection, %d KiB reads/writes; MB = 10^6 bytes, payload only\n",
		cfg.tputReps, cfg.tputTime, bulkBuf>>10)
	fmt.Printf("latency in µs, %d round trips each: new conn = connect + %d-byte HTTP request + %d-byte response, then close;\n",
		cfg.latN, len(request("GET", "/ping")), len(pingResponse))
	fmt.Printf("open conn = %d bytes each way on one open connection (TCP_NODELAY); loaded = the same, one every %s on that\n", msgSize, loadedEvery)
	fmt.Println("connection while a download of the same client runs; client, server and harness (Manager, proxy) are separate Go processes")
	fmt.Println("CPU busy = share of all CPUs busy during the path's runs (client, server, proxy and kernel all count)")
}
