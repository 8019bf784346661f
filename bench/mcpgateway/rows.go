package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutch-sandbox/hutch/internal/mcp/gateway"
)

type bench struct {
	ctx          context.Context
	cfg          *config
	everything   string // node_modules/.bin/mcp-server-everything
	supergateway string // node_modules/.bin/supergateway
	loopback     string // loopback.cjs
	self         string // this binary, run as the gateway's process
	log          *os.File

	mu        sync.Mutex
	running   []*server // server-side processes not yet stopped
	leftovers []string  // processes that had to be killed at a stop
	extra     []string  // notes printed after the table
	sbx       *sandboxRow
	closed    bool
}

func newBench(ctx context.Context, cfg *config) (*bench, error) {
	b := &bench{ctx: ctx, cfg: cfg,
		everything:   filepath.Join(cfg.dir, "node_modules", ".bin", "mcp-server-everything"),
		supergateway: filepath.Join(cfg.dir, "node_modules", ".bin", "supergateway"),
		loopback:     filepath.Join(cfg.dir, "loopback.cjs"),
	}
	var err error
	if b.self, err = os.Executable(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(cfg.logPath), 0o755); err != nil {
		return nil, err
	}
	if b.log, err = os.OpenFile(cfg.logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *bench) note(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.extra = append(b.extra, s)
}

func (b *bench) notes() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.extra...)
}

// newClient is the MCP client of every row: the official Go SDK's.
func newClient() *mcp.Client {
	return mcp.NewClient(&mcp.Implementation{Name: "hutch-bench-mcpgateway", Version: "1"}, nil)
}

// httpSession opens a streamable HTTP session to endpoint with headers,
// over an HTTP client of its own (its own connections, as a separate
// client would have). No standalone SSE stream: the calls need none, and
// every HTTP row is treated alike.
func httpSession(ctx context.Context, endpoint string, headers map[string]string) (*mcp.ClientSession, error) {
	tr := &http.Transport{Proxy: nil, MaxIdleConns: 16, MaxIdleConnsPerHost: 16, IdleConnTimeout: 90 * time.Second,
		DialContext: (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext}
	hc := &http.Client{Transport: headerRT{base: tr, headers: headers}}
	return newClient().Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, DisableStandaloneSSE: true}, nil)
}

type headerRT struct {
	base    http.RoundTripper
	headers map[string]string
}

func (h headerRT) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range h.headers {
		req.Header.Set(k, v)
	}
	return h.base.RoundTrip(req)
}

func token() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// freePort is a loopback port free right now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (b *bench) contenders() []*contender {
	var out []*contender
	for _, key := range rowKeys {
		var c *contender
		switch key {
		case "direct":
			c = b.direct()
		case "gateway":
			c = b.gatewayRow()
		case "sandbox":
			c = b.sandboxRow()
		case "sg-stateful":
			c = b.supergatewayRow(true)
		case "sg-stateless":
			c = b.supergatewayRow(false)
		case "floor":
			c = b.floorRow()
		}
		if c.unavailable == "" && c.key != "sandbox" && c.key != "floor" {
			if _, err := os.Stat(b.everything); err != nil {
				c.unavailable = "server-everything not installed in " + b.cfg.dir + " (bench/mcp-gateway.sh runs npm ci)"
			}
		}
		out = append(out, c)
	}
	return out
}

// direct: the client starts the server itself and speaks stdio to it.
func (b *bench) direct() *contender {
	c := &contender{key: "direct", name: "direct stdio", tool: toolName, shared: true, procs: "1"}
	c.open = func(ctx context.Context) (*mcp.ClientSession, int, error) {
		cmd := exec.Command(b.everything, "stdio")
		cmd.Stderr = b.log
		if c.cg != nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: c.cg.fd}
		}
		cs, err := newClient().Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}, nil)
		if err != nil {
			return nil, 0, err
		}
		return cs, cmd.Process.Pid, nil
	}
	return c
}

// server is a server-side process the harness started.
type server struct {
	name string
	cmd  *exec.Cmd
	cg   *cgroup // nil: none
	done chan struct{}
}

// startServer starts cmd in a process group of its own and in cg (when
// not nil), with its output in the log, and remembers it for stopping.
func (b *bench) startServer(name string, cmd *exec.Cmd, cg *cgroup) (*server, error) {
	// Its own process group, to signal it with what it started; SIGTERM
	// if the harness dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if cg != nil {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, cg.fd
	}
	if cmd.Stderr == nil {
		cmd.Stderr = b.log
	}
	if cmd.Stdout == nil {
		cmd.Stdout = b.log
	}
	fmt.Fprintf(b.log, "==> %s: %s\n", name, strings.Join(cmd.Args, " "))
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{name: name, cmd: cmd, cg: cg, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(s.done)
	}()
	b.mu.Lock()
	b.running = append(b.running, s)
	b.mu.Unlock()
	return s, nil
}

// stopServer ends s with SIGTERM (SIGKILL after 5 s), gives what it
// started 2 s to go, then kills whatever is left (of its cgroup, or of its
// descendants when it has none: supergateway starts its children in
// process groups of their own) and names them.
func (b *bench) stopServer(s *server) {
	if s == nil {
		return
	}
	b.mu.Lock()
	for i, r := range b.running {
		if r == s {
			b.running = append(b.running[:i], b.running[i+1:]...)
			break
		}
	}
	b.mu.Unlock()
	kids := snapshot(descendants(s.cmd.Process.Pid))
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
		b.addLeftover(s.name + " itself (SIGTERM ignored for 5 s)")
	}
	if s.cg != nil {
		b.emptyCgroup(s.name, s.cg)
		return
	}
	deadline := time.Now().Add(2 * time.Second)
	for len(kids.alive()) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	for _, p := range kids.alive() {
		syscall.Kill(p, syscall.SIGKILL)
		b.addLeftover(fmt.Sprintf("%s's child %d", s.name, p))
	}
}

// emptyCgroup waits up to 2 s for a row's processes to end, kills those
// left and removes the cgroup.
func (b *bench) emptyCgroup(name string, cg *cgroup) {
	deadline := time.Now().Add(2 * time.Second)
	for len(cg.procs()) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if left := cg.kill(); len(left) > 0 {
		b.addLeftover(fmt.Sprintf("%d process(es) of %s", len(left), name))
	}
}

func (b *bench) addLeftover(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.leftovers = append(b.leftovers, s)
}

// procSnapshot identifies processes by pid and start time (pids are
// reused).
type procSnapshot map[int]string

func snapshot(pids []int) procSnapshot {
	out := procSnapshot{}
	for _, p := range pids {
		if st := startTime(p); st != "" {
			out[p] = st
		}
	}
	return out
}

func (s procSnapshot) alive() []int {
	var out []int
	for p, st := range s {
		if startTime(p) == st {
			out = append(out, p)
		}
	}
	return out
}

// startTime is field 22 of /proc/<pid>/stat, "" if there is no such
// process (or it is a zombie: already dead).
func startTime(pid int) string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || f[0] == "Z" {
		return ""
	}
	return f[19]
}

// gatewayCmd makes this binary the gateway's process: `mcpgateway gateway
// ADDR COMMAND ARGS…` serves a gateway of one server, "everything",
// started as COMMAND ARGS, at ADDR with the token in GATEWAY_ACCESS_TOKEN,
// and prints "serving http://ADDR" once it does. It is what `hutch mcp
// gateway --serve` does (gateway.Serve) minus the configuration file in
// /etc/mcp-gateway, which is the sandbox's.
const gatewayCmd = "gateway"

// floorCmd in place of the server's command serves the floor row's Go
// echo tool instead of a gateway.
const floorCmd = "-floor"

// floorHandler serves one tool, everything__echo, answered in Go, with the
// Go SDK's streamable HTTP handler configured as the gateway's Handler
// configures it (stateless, no localhost check, cancellation propagated)
// behind the same kind of bearer check.
func floorHandler(tok string) http.Handler {
	srv := mcp.NewServer(&mcp.Implementation{Name: "hutch-bench-floor", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "everything" + gateway.Separator + toolName, Description: "Echoes back the input string",
		InputSchema: map[string]any{"type": "object", "properties": map[string]any{"message": map[string]any{"type": "string"}}, "required": []any{"message"}}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ Message string }
			if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
				return nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "Echo: " + in.Message}}}, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		Stateless: true, DisableLocalhostProtection: true, PropagateRequestCancellation: true})
	mux := http.NewServeMux()
	mux.Handle(gateway.Path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(tok)) != 1 {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	return mux
}

// profileEnv, if set in the harness's environment, names a file for a CPU
// profile of the gateway's process (go tool pprof).
const profileEnv = "HUTCH_BENCH_GATEWAY_CPUPROFILE"

func serveGateway(args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: mcpgateway gateway ADDR COMMAND [ARGS…]")
		return 2
	}
	tok := os.Getenv("GATEWAY_ACCESS_TOKEN")
	if tok == "" {
		fmt.Fprintln(os.Stderr, "mcpgateway gateway: GATEWAY_ACCESS_TOKEN is empty")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// For looking into the gateway's own cost: a CPU profile of this
	// process, written when it stops.
	if path := os.Getenv(profileEnv); path != "" {
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "mcpgateway gateway: %v\n", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(os.Stderr, "mcpgateway gateway: %v\n", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	var handler http.Handler
	if args[1] == floorCmd {
		handler = floorHandler(tok)
	} else {
		servers := []*gateway.Server{{Name: "everything", Command: args[1], Args: args[2:]}}
		g, err := gateway.New(ctx, servers, gateway.Options{Workspace: os.TempDir(), Stderr: os.Stderr})
		if err != nil {
			fmt.Fprintf(os.Stderr, "mcpgateway gateway: %v\n", err)
			return 1
		}
		defer g.Close()
		handler = g.Handler(tok)
	}
	ln, err := net.Listen("tcp", args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "mcpgateway gateway: %v\n", err)
		return 1
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 30 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	fmt.Printf("serving http://%s\n", ln.Addr())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(os.Stderr, "mcpgateway gateway: %v\n", err)
		return 1
	}
	return 0
}

// gatewayRow: Hutch's gateway on the host, on loopback.
func (b *bench) gatewayRow() *contender {
	c := &contender{key: "gateway", name: "hutch gateway (loopback)", tool: "everything" + gateway.Separator + toolName,
		procs: "1 (shared)"}
	return b.selfServed(c, b.everything, "stdio")
}

// floorRow: no upstream at all: the same tool answered in Go by an MCP
// server of the Go SDK behind the gateway's HTTP options and bearer check.
// Not the same server as the other rows: it shows what the Go SDK's
// streamable HTTP round trip costs by itself, the floor under the
// gateway's row.
func (b *bench) floorRow() *contender {
	c := &contender{key: "floor", name: "(floor) Go SDK HTTP, echo in Go", tool: "everything" + gateway.Separator + toolName,
		procs: "0"}
	return b.selfServed(c, floorCmd)
}

// selfServed completes c with a server process of this binary (`mcpgateway
// gateway 127.0.0.1:0 ARGS…`) and its HTTP client.
func (b *bench) selfServed(c *contender, args ...string) *contender {
	var srv *server
	var url string
	tok := token()
	c.start = func(ctx context.Context) error {
		cmd := exec.Command(b.self, append([]string{gatewayCmd, "127.0.0.1:0"}, args...)...)
		cmd.Env = append(os.Environ(), "GATEWAY_ACCESS_TOKEN="+tok)
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if srv, err = b.startServer(c.name, cmd, c.cg); err != nil {
			return err
		}
		line := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if u, ok := strings.CutPrefix(sc.Text(), "serving "); ok {
					line <- u
					break
				}
			}
			io.Copy(io.Discard, out)
		}()
		select {
		case u := <-line:
			url = u
			return nil
		case <-srv.done:
			return fmt.Errorf("the server exited before serving (log: %s)", b.cfg.logPath)
		case <-time.After(60 * time.Second):
			return fmt.Errorf("the server did not serve within 60 s (log: %s)", b.cfg.logPath)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c.open = func(ctx context.Context) (*mcp.ClientSession, int, error) {
		cs, err := httpSession(ctx, url+gateway.Path, map[string]string{"Authorization": "Bearer " + tok})
		return cs, 0, err
	}
	c.serverPID = func() int {
		if srv == nil {
			return 0
		}
		return srv.cmd.Process.Pid
	}
	c.stop = func() { b.stopServer(srv) }
	return c
}

// supergatewayRow: supergateway 4.0.0 wrapping the same server, stateful
// (one child per session) or stateless (one child per POST).
func (b *bench) supergatewayRow(stateful bool) *contender {
	c := &contender{key: "sg-stateless", name: "supergateway (stateless)", tool: toolName, procs: "1 per request"}
	if stateful {
		c.key, c.name, c.procs = "sg-stateful", "supergateway --stateful", "1 per session"
	}
	if _, err := os.Stat(b.supergateway); err != nil {
		c.unavailable = "supergateway not installed in " + b.cfg.dir + " (bench/mcp-gateway.sh runs npm ci)"
		return c
	}
	var srv *server
	var port int
	c.start = func(ctx context.Context) error {
		var err error
		if port, err = freePort(); err != nil {
			return err
		}
		args := []string{"--stdio", b.everything + " stdio", "--outputTransport", "streamableHttp",
			"--port", strconv.Itoa(port), "--healthEndpoint", "/healthz", "--logLevel", "none"}
		if stateful {
			args = append(args, "--stateful")
		}
		cmd := exec.Command(b.supergateway, args...)
		cmd.Env = append(os.Environ(), "NODE_OPTIONS=--require "+b.loopback)
		if srv, err = b.startServer(c.name, cmd, c.cg); err != nil {
			return err
		}
		deadline := time.Now().Add(60 * time.Second)
		for {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", port))
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return nil
				}
			}
			select {
			case <-srv.done:
				return fmt.Errorf("supergateway exited before serving (log: %s)", b.cfg.logPath)
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("supergateway did not serve within 60 s (log: %s)", b.cfg.logPath)
			}
		}
	}
	c.open = func(ctx context.Context) (*mcp.ClientSession, int, error) {
		cs, err := httpSession(ctx, fmt.Sprintf("http://127.0.0.1:%d/mcp", port), nil)
		return cs, 0, err
	}
	c.serverPID = func() int {
		if srv == nil {
			return 0
		}
		return srv.cmd.Process.Pid
	}
	c.stop = func() { b.stopServer(srv) }
	return c
}

// close stops every server still running and the sandbox, and returns
// what had to be killed. Safe to call more than once.
func (b *bench) close() []string {
	b.mu.Lock()
	running := append([]*server(nil), b.running...)
	sbx := b.sbx
	b.sbx = nil
	closed := b.closed
	b.closed = true
	b.mu.Unlock()
	for _, s := range running {
		b.stopServer(s)
	}
	if sbx != nil {
		sbx.kill()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !closed {
		b.log.Sync()
	}
	return append([]string(nil), b.leftovers...)
}
