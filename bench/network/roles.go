package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netns"
)

// The data-path measurements run in three kinds of processes, as they
// would in production: the harness is the host (Manager and egress
// proxy, as in `hutch serve`), a server process is the internet (or the
// far end of the direct and routed paths), and a client process is the
// sandbox's program. All three are this binary, told their role by
// envRole and started from a thread in the namespace they belong to (a
// child starts in the namespace of the thread that forks it). In one Go
// process, client, server and proxy goroutines share the runtime's Ps
// (two on a 2-core machine) and wait for each other's scheduling: the
// proxied rows' new connections had a p95 of ~10 ms that way, a cost no
// real sandbox pays.
const envRole = "HUTCH_BENCH_NETWORK_ROLE"

// Roles.
const (
	roleServer = "server"
	roleClient = "client"
)

// runRole runs this process's role, if it has one, and exits.
func runRole() {
	switch os.Getenv(envRole) {
	case roleServer:
		os.Exit(serverMain(os.Args[1:]))
	case roleClient:
		os.Exit(clientMain(os.Args[1:]))
	}
}

// serverMain listens on every address given and serves until its stdin
// ends (the harness exits or closes it). It says "ready" on stdout once
// it listens.
func serverMain(addrs []string) int {
	for _, a := range addrs {
		ln, err := net.Listen("tcp4", a)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench-network server: %v\n", err)
			return 1
		}
		go serve(ln)
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// server is a running server process.
type server struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// startServer starts a server process in ns listening on addrs, and waits
// until it listens.
func startServer(ns netns.NsHandle, addrs ...string) (*server, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, addrs...)
	cmd.Env = append(os.Environ(), envRole+"="+roleServer)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var serr error
	if err := inNS(ns, func() { serr = cmd.Start() }); err != nil {
		return nil, err
	}
	if serr != nil {
		return nil, serr
	}
	s := &server{cmd: cmd, stdin: stdin}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		s.stop()
		return nil, fmt.Errorf("server on %v did not start: %q %v", addrs, line, err)
	}
	return s, nil
}

// stop ends the server and reaps it.
func (s *server) stop() {
	s.stdin.Close()
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
}

// loadedEvery paces the round trips measured during a download: often
// enough for percentiles, seldom enough not to slow the transfer.
const loadedEvery = 10 * time.Millisecond

// clientResult is what a client process measured, as JSON on its stdout.
type clientResult struct {
	Conn, Open, Loaded []time.Duration
	// Failures of single round trips, and the first error.
	Failed   int
	FirstErr string
	// Down and Up are bytes/s, 0 when not measured.
	Down, Up float64
	// Err is a failure that stopped the measurement.
	Err string
}

// clientMain measures one path to -addr: n connect + request + response
// round trips, n round trips on an open connection, then one download
// (with the loaded round trips alongside) and one upload of -tput each.
func clientMain(args []string) int {
	fs := flag.NewFlagSet("client", flag.ExitOnError)
	addr := fs.String("addr", "", "server ip:port")
	n := fs.Int("n", 100, "round trips of each kind")
	warmup := fs.Int("warmup", 10, "unmeasured round trips first")
	tput := fs.Duration("tput", time.Second, "duration of each transfer")
	fs.Parse(args)
	r := &clientResult{}
	r.Err = measureClient(r, *addr, *n, *warmup, *tput)
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		return 1
	}
	return 0
}

// measureClient fills r; it returns why it stopped early, or "".
func measureClient(r *clientResult, addr string, n, warmup int, tput time.Duration) string {
	fail := func(err error) {
		r.Failed++
		if r.FirstErr == "" {
			r.FirstErr = err.Error()
		}
	}
	buf := make([]byte, 512)
	// Connect + small request + small response, a new connection each
	// time.
	for i := 0; i < warmup; i++ {
		if err := ping(addr, buf); err != nil {
			return "ping: " + err.Error()
		}
	}
	for i := 0; i < n; i++ {
		t := time.Now()
		if err := ping(addr, buf); err != nil {
			fail(err)
			continue
		}
		r.Conn = append(r.Conn, time.Since(t))
	}

	// Round trips on one open connection.
	c, err := openEcho(addr)
	if err != nil {
		return "echo: " + err.Error()
	}
	defer c.Close()
	msg := make([]byte, msgSize)
	for i := 0; i < warmup; i++ {
		if err := roundTrip(c, msg, buf); err != nil {
			return "echo: " + err.Error()
		}
	}
	for i := 0; i < n; i++ {
		t := time.Now()
		if err := roundTrip(c, msg, buf); err != nil {
			fail(err)
			break
		}
		r.Open = append(r.Open, time.Since(t))
	}

	// Bulk transfers, one way at a time. During the download, a round
	// trip every loadedEvery on the open connection: what a bulk
	// transfer does to the latency of everything else of the sandbox
	// (the queues it fills on the way).
	stop, probed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(probed)
		msg, buf := make([]byte, msgSize), make([]byte, msgSize)
		tick := time.NewTicker(loadedEvery)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			t := time.Now()
			if err := roundTrip(c, msg, buf); err != nil {
				fail(err)
				return
			}
			r.Loaded = append(r.Loaded, time.Since(t))
		}
	}()
	nb, d, err := download(addr, tput)
	close(stop)
	<-probed
	if err != nil {
		return "download: " + err.Error()
	}
	r.Down = float64(nb) / d.Seconds()
	nb, d, err = upload(addr, tput)
	if err != nil {
		return "upload: " + err.Error()
	}
	r.Up = float64(nb) / d.Seconds()
	return ""
}

// runClient runs a client process in ns against addr and returns what it
// measured.
func runClient(ns netns.NsHandle, addr string, n, warmup int, tput time.Duration) (*clientResult, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "-addr", addr, "-n", strconv.Itoa(n), "-warmup", strconv.Itoa(warmup), "-tput", tput.String())
	cmd.Env = append(os.Environ(), envRole+"="+roleClient)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var serr error
	if err := inNS(ns, func() { serr = cmd.Start() }); err != nil {
		return nil, err
	}
	if serr != nil {
		return nil, serr
	}
	r := &clientResult{}
	derr := json.NewDecoder(stdout).Decode(r)
	werr := cmd.Wait()
	if derr != nil {
		return nil, fmt.Errorf("client: %w", errors.Join(derr, werr))
	}
	if r.Err != "" {
		return r, errors.New(r.Err)
	}
	return r, nil
}
