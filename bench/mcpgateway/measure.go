package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
)

// contender is one row: how to start its server side, and how to open a
// client session to it.
type contender struct {
	key, name string
	// tool is the tool's name as this row exposes it (the gateway
	// prefixes it with the server's name).
	tool string
	// shared: the concurrent clients share one session (one stdio server
	// process: stdio has one client per process).
	shared bool
	// procs describes the server processes serving the clients.
	procs string
	// unavailable says why the row cannot run, if so.
	unavailable string
	// procTree: the server side's CPU is counted from /proc process trees
	// (serverPID, extraPIDs, the sessions' pids), not from a cgroup of
	// the harness's (the sandbox row: its processes are Hutch's).
	procTree bool
	// cg is the row's cgroup while it runs, nil without one; start and
	// open start the row's server processes in it.
	cg *cgroup
	// start starts the server side (nil: nothing to start).
	start func(ctx context.Context) error
	// open opens a client session; pid is the server process it started,
	// if any (direct stdio), for CPU accounting.
	open func(ctx context.Context) (cs *mcp.ClientSession, pid int, err error)
	// serverPID is the server side's main process (gateway, supergateway)
	// once started, 0 if none or unknown.
	serverPID func() int
	// extraPIDs are further server-side processes to account, if any.
	extraPIDs func() []int
	// stop stops the server side.
	stop func()
}

// result is one row's numbers.
type result struct {
	key, name, procs string
	unavailable      string
	proto            string          // negotiated protocol version
	seq              []time.Duration // sorted
	busy             float64
	seqFailed        int
	seqErr           string
	warmFailed       int
	warmErr          string
	tput             throughput
}

// throughput is the concurrent series' outcome.
type throughput struct {
	calls, failed        int
	firstErr             string
	wall                 time.Duration
	clientCPU, serverCPU time.Duration
	serverKnown          bool
	openErr              string
}

func (t throughput) rate() float64 {
	if t.wall <= 0 {
		return 0
	}
	return float64(t.calls) / t.wall.Seconds()
}

func (r *result) notes(cfg *config) []string {
	var out []string
	if r.proto != "" {
		out = append(out, "protocol "+r.proto)
	}
	if r.warmFailed > 0 {
		out = append(out, fmt.Sprintf("%d of %d warm-up calls failed: %s", r.warmFailed, cfg.warmup, r.warmErr))
	}
	if r.seqFailed > 0 {
		out = append(out, fmt.Sprintf("%d of %d sequential calls failed: %s", r.seqFailed, r.seqFailed+len(r.seq), r.seqErr))
	}
	if r.tput.openErr != "" {
		out = append(out, "throughput series not run: "+r.tput.openErr)
	}
	if r.tput.failed > 0 {
		out = append(out, fmt.Sprintf("%d calls failed in the throughput series: %s", r.tput.failed, r.tput.firstErr))
	}
	return out
}

// call makes the row's one call and checks its answer.
func (b *bench) call(cs *mcp.ClientSession, tool string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.callTimeout)
	defer cancel()
	t0 := time.Now()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"message": message}})
	d := time.Since(t0)
	if err != nil {
		return d, err
	}
	if res.IsError {
		return d, fmt.Errorf("tool error: %s", text(res))
	}
	if got := text(res); got != wantText {
		return d, fmt.Errorf("unexpected answer %q", got)
	}
	return d, nil
}

func text(res *mcp.CallToolResult) string {
	var sb strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			sb.WriteString(t.Text)
		}
	}
	return sb.String()
}

// measure runs one row: start, warm-up, sequential series, throughput
// series, stop.
func (b *bench) measure(c *contender) *result {
	r := &result{key: c.key, name: c.name, procs: c.procs, busy: -1}
	fmt.Printf("%-34s ", c.name)
	defer fmt.Println()
	fail := func(why string) *result {
		r.unavailable = harness.OneLine(why)
		fmt.Print("unavailable: ", r.unavailable)
		return r
	}
	if c.unavailable != "" {
		return fail(c.unavailable)
	}
	if !c.procTree {
		if cg, err := newCgroup(c.key); err == nil {
			c.cg = cg
			defer func() {
				b.emptyCgroup(c.name, cg)
				c.cg = nil
			}()
		} else {
			fmt.Fprintf(b.log, "==> %s: no cgroup (%v): server CPU from /proc process trees\n", c.name, err)
		}
	}
	if c.stop != nil {
		defer c.stop()
	}
	if c.start != nil {
		if err := c.start(b.ctx); err != nil {
			return fail(err.Error())
		}
	}
	cs, _, err := c.open(b.ctx)
	if err != nil {
		return fail("connect: " + err.Error())
	}
	if ir := cs.InitializeResult(); ir != nil {
		r.proto = ir.ProtocolVersion
	}
	anyOK := false
	for i := 0; i < b.cfg.warmup && b.ctx.Err() == nil; i++ {
		if _, err := b.call(cs, c.tool); err != nil {
			r.warmFailed++
			if r.warmErr == "" {
				r.warmErr = harness.OneLine(err.Error())
			}
			continue
		}
		anyOK = true
	}
	if !anyOK && b.cfg.warmup > 0 {
		cs.Close()
		return fail("every warm-up call failed: " + r.warmErr)
	}

	i0, t0, _ := harness.CPUSample()
	for i := 0; i < b.cfg.n && b.ctx.Err() == nil; i++ {
		d, err := b.call(cs, c.tool)
		if err != nil {
			r.seqFailed++
			if r.seqErr == "" {
				r.seqErr = harness.OneLine(err.Error())
			}
		} else {
			r.seq = append(r.seq, d)
		}
		if (i+1)%max(1, b.cfg.n/10) == 0 {
			fmt.Print(".")
		}
	}
	if i1, t1, err := harness.CPUSample(); err == nil && t1 > t0 {
		r.busy = 1 - float64(i1-i0)/float64(t1-t0)
	}
	sortDurations(r.seq)
	cs.Close()
	if len(r.seq) == 0 {
		return fail("every sequential call failed: " + r.seqErr)
	}
	fmt.Printf(" p50 %s ms", ms(harness.Pct(r.seq, .5)))

	if b.cfg.c > 0 && b.ctx.Err() == nil {
		r.tput = b.throughput(c)
		if r.tput.openErr == "" {
			fmt.Printf(", %d clients: %.1f calls/s", b.cfg.c, r.tput.rate())
		}
	}
	return r
}

// throughput opens the clients' sessions (one shared session for a stdio
// row), makes one call on each (not counted), then lets every client call
// in a loop until -d has passed, and waits for the calls in flight.
func (b *bench) throughput(c *contender) (t throughput) {
	n := b.cfg.c
	sessions := make([]*mcp.ClientSession, 0, n)
	var pids []int
	defer func() {
		var wg sync.WaitGroup
		for _, cs := range sessions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cs.Close()
			}()
		}
		wg.Wait()
	}()
	opens := n
	if c.shared {
		opens = 1
	}
	for range opens {
		cs, pid, err := c.open(b.ctx)
		if err != nil {
			t.openErr = harness.OneLine(err.Error())
			return t
		}
		sessions = append(sessions, cs)
		if pid > 0 {
			pids = append(pids, pid)
		}
		if _, err := b.call(cs, c.tool); err != nil {
			t.openErr = "first call of a client: " + harness.OneLine(err.Error())
			return t
		}
	}
	roots := pids
	if c.serverPID != nil {
		if p := c.serverPID(); p > 0 {
			roots = append(roots, p)
		}
	}
	if c.extraPIDs != nil {
		roots = append(roots, c.extraPIDs()...)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	// deadline is set before gate is closed, read after: the close
	// orders the two.
	var deadline time.Time
	gate := make(chan struct{})
	for i := range n {
		cs := sessions[i%len(sessions)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			var calls, failed int
			var firstErr string
			for time.Now().Before(deadline) && b.ctx.Err() == nil {
				if _, err := b.call(cs, c.tool); err != nil {
					failed++
					if firstErr == "" {
						firstErr = harness.OneLine(err.Error())
					}
					continue
				}
				calls++
			}
			mu.Lock()
			defer mu.Unlock()
			t.calls += calls
			t.failed += failed
			if t.firstErr == "" {
				t.firstErr = firstErr
			}
		}()
	}
	serverCPU := func() (time.Duration, bool) {
		if c.cg != nil {
			return c.cg.usage()
		}
		if len(roots) == 0 {
			return 0, false
		}
		return treeCPU(roots)
	}
	srv0, srvOK0 := serverCPU()
	cli0 := selfCPU()
	t0 := time.Now()
	deadline = t0.Add(b.cfg.dur)
	close(gate)
	wg.Wait()
	t.wall = time.Since(t0)
	t.clientCPU = selfCPU() - cli0
	srv1, srvOK1 := serverCPU()
	t.serverCPU = srv1 - srv0
	t.serverKnown = srvOK0 && srvOK1
	return t
}

// selfCPU is this process's CPU time (user + system) so far.
func selfCPU() time.Duration { return harness.SelfCPU() }

// clockTick is USER_HZ, the unit of /proc/<pid>/stat's times (100 on
// Linux everywhere).
const clockTick = 100

// procStat is the part of /proc/<pid>/stat used here.
type procStat struct {
	ppid int
	cpu  time.Duration // utime + stime + cutime + cstime
}

// readProcs reads every process's parent and CPU time.
func readProcs() map[int]procStat {
	out := map[int]procStat{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		// After the command: state(0) ppid(1) … utime(11) stime(12)
		// cutime(13) cstime(14).
		if len(f) < 15 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		var ticks int64
		for _, k := range []int{11, 12, 13, 14} {
			v, _ := strconv.ParseInt(f[k], 10, 64)
			ticks += v
		}
		out[pid] = procStat{ppid: ppid, cpu: time.Duration(ticks) * time.Second / clockTick}
	}
	return out
}

// treeCPU sums the CPU time of the processes roots and all their
// descendants, including the children they have reaped (cutime, cstime):
// a child that exits between two samples is counted in its parent's.
func treeCPU(roots []int) (time.Duration, bool) {
	if len(roots) == 0 {
		return 0, false
	}
	procs := readProcs()
	children := map[int][]int{}
	for pid, p := range procs {
		children[p.ppid] = append(children[p.ppid], pid)
	}
	var total time.Duration
	seen := map[int]bool{}
	queue := append([]int(nil), roots...)
	ok := true
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		p, found := procs[pid]
		if !found {
			ok = ok && !contains(roots, pid)
			continue
		}
		total += p.cpu
		queue = append(queue, children[pid]...)
	}
	return total, ok
}

func contains(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// descendants lists the live descendants of pid.
func descendants(pid int) []int {
	procs := readProcs()
	children := map[int][]int{}
	for p, s := range procs {
		children[s.ppid] = append(children[s.ppid], p)
	}
	var out []int
	queue := append([]int(nil), children[pid]...)
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		out = append(out, p)
		queue = append(queue, children[p]...)
	}
	return out
}
