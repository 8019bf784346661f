package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// memberCmd is the hidden first argument that makes this program one
// embedded etcd member instead of the simulation (dispatched before flag
// parsing, as runc dispatches "init"). Each member is a process of its
// own so that the CPU of each (the leader's apart) and of the simulation
// can be told apart.
const memberCmd = "member"

// runMember is the member process: it starts one embedded member with the
// flags in args, and stops it on SIGTERM or SIGINT (HardStop, then Close:
// its peers are stopped at the same time, so nothing is handed over).
func runMember(args []string) int {
	fs := flag.NewFlagSet("etcdsim member", flag.ContinueOnError)
	name := fs.String("name", "", "member name")
	dir := fs.String("dir", "", "data directory (0700)")
	clientURL := fs.String("client-url", "", "client URL")
	peerURL := fs.String("peer-url", "", "peer URL")
	initial := fs.String("initial-cluster", "", "NAME=PEERURL,...")
	compaction := fs.String("compaction", "0", "auto-compaction retention (periodic)")
	logFile := fs.String("log", "", "etcd's log file (warn and up)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg := embed.NewConfig()
	cfg.Name = *name
	cfg.Dir = *dir
	cu, err := url.Parse(*clientURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdsim member:", err)
		return 2
	}
	pu, err := url.Parse(*peerURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdsim member:", err)
		return 2
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = *initial
	cfg.InitialClusterToken = "hutch-etcdsim"
	cfg.ClusterState = embed.ClusterStateFlagNew
	cfg.AutoCompactionMode = embed.CompactorModePeriodic
	cfg.AutoCompactionRetention = *compaction
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{*logFile}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcdsim member %s: %v\n", *name, err)
		return 1
	}
	select {
	case <-sig:
		e.Server.HardStop()
		e.Close()
		return 0
	case err := <-e.Err():
		fmt.Fprintf(os.Stderr, "etcdsim member %s: %v\n", *name, err)
		e.Close()
		return 1
	}
}

// member is one member process started by startCluster.
type member struct {
	name, clientURL string
	cmd             *exec.Cmd
	out             string // the process's own output
	log             string // etcd's log
	done            chan struct{}
}

func (m *member) pid() int { return m.cmd.Process.Pid }

func (m *member) exited() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

// tail is the end of the member's output and etcd's log, for errors.
func (m *member) tail() string {
	var s string
	for _, f := range []string{m.out, m.log} {
		b, _ := os.ReadFile(f)
		s += strings.TrimSpace(string(b)) + "\n"
	}
	s = strings.TrimSpace(s)
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return s
}

// cluster is a 3-voter etcd on loopback, one process per member, in a
// directory of its own.
type cluster struct {
	dir     string
	members []*member
}

// startCluster starts n members (m1, m2, ...) of this program's binary in
// dir, with a client and a peer port on 127.0.0.1 each (picked free), as
// one new cluster, and waits until each answers Status and a leader is
// elected, or 30 s. compaction is etcd's periodic auto-compaction
// retention ("0": none). The members die with this process (Pdeathsig).
// On error it stops whatever it started.
func startCluster(ctx context.Context, dir string, n int, compaction string) (*cluster, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: dir}
	var initial []string
	for i := range n {
		name := fmt.Sprintf("m%d", i+1)
		c.members = append(c.members, &member{name: name, clientURL: fmt.Sprintf("http://127.0.0.1:%d", ports[2*i])})
		initial = append(initial, fmt.Sprintf("%s=http://127.0.0.1:%d", name, ports[2*i+1]))
	}
	for i, m := range c.members {
		m.out = filepath.Join(dir, m.name+".out")
		m.log = filepath.Join(dir, m.name+".log")
		f, err := os.Create(m.out)
		if err != nil {
			c.stop()
			return nil, err
		}
		m.cmd = exec.Command(exe, memberCmd,
			"-name", m.name, "-dir", filepath.Join(dir, m.name),
			"-client-url", m.clientURL, "-peer-url", fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
			"-initial-cluster", strings.Join(initial, ","), "-compaction", compaction, "-log", m.log)
		m.cmd.Stdout, m.cmd.Stderr = f, f
		m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		err = m.cmd.Start()
		f.Close()
		if err != nil {
			c.stop()
			return nil, fmt.Errorf("start member %s: %w", m.name, err)
		}
		m.done = make(chan struct{})
		go func() { m.cmd.Wait(); close(m.done) }()
	}
	if err := c.waitReady(ctx, 30*time.Second); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// waitReady polls each member's Status until all answer with a leader.
func (c *cluster) waitReady(ctx context.Context, timeout time.Duration) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.endpoints(), DialTimeout: timeout, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	deadline := time.Now().Add(timeout)
	for _, m := range c.members {
		for {
			if m.exited() {
				return fmt.Errorf("etcd member %s exited: %s", m.name, m.tail())
			}
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := cli.Status(sctx, m.clientURL)
			cancel()
			if err == nil && st.Leader != 0 {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("etcd member %s not ready after %s (%v): %s", m.name, timeout, err, m.tail())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

func (c *cluster) endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.clientURL)
	}
	return eps
}

// stop stops every member at once (SIGTERM; SIGKILL after 10 s) and waits
// for them. The directory stays.
func (c *cluster) stop() {
	var wg sync.WaitGroup
	for _, m := range c.members {
		if m.cmd == nil || m.cmd.Process == nil || m.done == nil {
			continue
		}
		wg.Go(func() {
			m.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-m.done:
			case <-time.After(10 * time.Second):
				m.cmd.Process.Kill()
				<-m.done
			}
		})
	}
	wg.Wait()
}

// freePorts returns n TCP ports on 127.0.0.1 that were free a moment ago
// (held together so that they differ). embed.Config takes URLs, not
// listeners, and the members must know each other's peer URLs before any
// of them starts. (internal/cluster/etcdtest has the same for tests; a
// benchmark may not link test helpers.)
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
