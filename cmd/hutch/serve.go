package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/cabundle"
	"github.com/hutch-sandbox/hutch/internal/fault"
	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/serve"
	"github.com/hutch-sandbox/hutch/internal/store"
	"github.com/hutch-sandbox/hutch/internal/units"
	"github.com/hutch-sandbox/hutch/internal/version"
)

func newServeCmd(g *globals) *cobra.Command {
	var (
		listen, domain string
		disk           string
		maxMemory      string
		maxCPUs        float64
		runtimeName    string
		runtimes       []string
		warm           int
		warmTemplates  map[string]int
		readyTimeout   time.Duration
		snapshotTTL    time.Duration
		volumeSize     string
		maxVolumes     int
		pausedKeep     time.Duration
		registryAllow  []string
		mcpMirror      string
		withNet        bool
		netCIDR        string
		dnsUpstream    []string
		maxConns       uint32
		conns          connFlags
		caps           sandboxCaps
		caBundle       string
		tlsf           tlsFlags
		clf            clusterFlags
		metricsListen  string
		metricsAPI     bool
		auditKeep      time.Duration
		noAudit        bool
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve E2B's control-plane API and route sandbox traffic (E2B SDKs work against it)",
		Long: `Serve listens on one address for both E2B's REST API and the traffic of
sandboxes (requests carrying E2b-Sandbox-Id, or Host "<port>-<id>.<domain>").
API keys come from HUTCH_API_KEY (added at start) or, when there is no key at
all, a new one is created, printed once and written to DATA_DIR/api-key.
Stopping the server leaves sandboxes running; a restart adopts them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
			domain = strings.ToLower(strings.TrimSuffix(domain, "."))
			if domain != "" && !validDomain(domain) {
				return fmt.Errorf("--domain %q: want a DNS name such as sandbox.example.com, without a scheme or port", domain)
			}
			var extraCAs *cabundle.Bundle
			if caBundle != "" {
				b, err := cabundle.Load(caBundle)
				if err != nil {
					return fmt.Errorf("--ca-bundle: %w", err)
				}
				extraCAs = b
				logger.Info("sandboxes trust extra CA certificates", "from", caBundle, "certificates", b.Len())
			}
			unlock, err := lockDataDir(g.dataDir)
			if err != nil {
				return err
			}
			defer unlock()
			// Before anything slow: a certificate clients would refuse
			// stops the server at once.
			tc, err := tlsf.config(ctx, g.dataDir, domain, os.Stdout, logger)
			if err != nil {
				return err
			}
			clusterCfg, err := clf.config(g.dataDir)
			if err != nil {
				return err
			}
			diskBytes, err := units.ParseBytes(disk)
			if err != nil {
				return fmt.Errorf("--disk: %w", err)
			}
			maxMemoryBytes, err := units.ParseBytes(maxMemory)
			if err != nil {
				return fmt.Errorf("--max-memory: %w", err)
			}
			if maxCPUs < 0 {
				return fmt.Errorf("--max-cpus %g: want 0 (every core) or more", maxCPUs)
			}
			volumeBytes, err := units.ParseBytes(volumeSize)
			if err != nil {
				return fmt.Errorf("--volume-size: %w", err)
			}
			if volumeBytes > 0 && volumeBytes < 16<<20 {
				return fmt.Errorf("--volume-size %s: at least 16M (or 0 for no limit)", volumeSize)
			}
			pools := map[string]int{sandbox.DefaultTemplate: warm}
			for name, n := range warmTemplates {
				if n < 0 {
					return fmt.Errorf("--warm-template %s=%d: the size must be 0 or more", name, n)
				}
				pools[name] = n
			}
			resources := runtime.Resources{MemoryBytes: 512 << 20, CPUs: 1, Pids: 512, DiskBytes: diskBytes}
			total, perKey, err := caps.resolve(resources.MemoryBytes)
			if err != nil {
				return err
			}
			logger.Info("sandbox caps", "total", total, "per key", perKey)
			cfg := serve.Config{
				DataDir: g.dataDir, Templates: g.templates, Domain: domain,
				Resources: resources, MaxResources: runtime.Resources{MemoryBytes: maxMemoryBytes, CPUs: maxCPUs}, Warm: pools, MaxSandboxes: total, MaxPerKey: perKey,
				TuneHost: true, Logger: logger, SandboxBinary: sandboxBinary(logger), CABundle: extraCAs,
				ReadyTimeout: readyTimeout, RegistryAllow: registryAllow, MCPRegistryMirror: mcpMirror,
				SnapshotTTL: snapshotTTL, PausedRetention: pausedKeep, VolumeSize: volumeBytes, MaxVolumesPerKey: maxVolumes,
				Runtime: runtimeName, Runtimes: runtimes, Cluster: clusterCfg,
				MetricsOnAPI: metricsAPI, AuditRetention: auditKeep, NoAudit: noAudit,
			}
			// A test hook (package fault), read once here: not a flag.
			if cfg.Faults, err = fault.Parse(g.getenv(fault.Env)); err != nil {
				return err
			}
			if cfg.Faults.Armed() {
				logger.Warn("fault points armed: this server kills itself at them (a test hook)", "points", g.getenv(fault.Env))
			}
			if withNet {
				cfg.Network = &serve.NetworkConfig{CIDR: netCIDR, DNSUpstream: dnsUpstream, MaxConns: maxConns}
			}
			s, err := serve.Open(ctx, cfg)
			if err != nil {
				return err
			}
			defer s.Close()
			if err := ensureKey(ctx, g, s.Store); err != nil {
				return err
			}
			if s.Cluster != nil {
				if err := syncClusterKeys(ctx, s.Cluster, logger); err != nil {
					return err
				}
			}
			// The metrics' listener first: an address taken stops the
			// server before it takes clients.
			var metricsLn net.Listener
			if metricsListen != "" {
				if metricsLn, err = net.Listen("tcp", metricsListen); err != nil {
					return fmt.Errorf("--metrics-listen: %w", err)
				}
				defer metricsLn.Close()
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			capped, srv, err := serve.Listen(ln, s.Handler, conns.options(), tc, logger)
			if err != nil {
				ln.Close()
				return err
			}
			logger.Info("serving", "addr", ln.Addr().String(), "data", g.dataDir, "tls", tc != nil, "domain", domain, "version", version.Get().String())
			errc := make(chan error, 2)
			go func() { errc <- serve.Serve(srv, capped) }()
			if metricsLn != nil {
				msrv := s.MetricsServer()
				defer msrv.Close()
				logger.Info("serving metrics", "addr", metricsLn.Addr().String(), "path", "/metrics")
				go func() {
					if err := msrv.Serve(metricsLn); !errors.Is(err, http.ErrServerClosed) {
						errc <- fmt.Errorf("metrics listener: %w", err)
					}
				}()
			}
			// Under systemd (Type=notify, packaging/hutch.service) the unit
			// is started only now, with its sandboxes adopted and the
			// listeners open; elsewhere there is no socket and this is a no-op.
			if _, err := daemon.SdNotify(false, daemon.SdNotifyReady); err != nil {
				logger.Warn("tell systemd the server is ready", "err", err)
			}
			select {
			case err := <-errc:
				return err
			case <-ctx.Done():
			}
			daemon.SdNotify(false, daemon.SdNotifyStopping)
			// Graceful: finish requests in flight; sandboxes keep running.
			shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:3000", "address to serve on")
	cmd.Flags().StringVar(&domain, "domain", "", `the domain clients reach the server by (E2B_DOMAIN): api.<domain> serves the API, "<port>-<id>.<domain>" a sandbox's port, on the same listener; the names must resolve to this server (docs/tls.md)`)
	tlsf.register(cmd.Flags())
	clf.register(cmd.Flags())
	cmd.Flags().StringVar(&metricsListen, "metrics-listen", "", "serve Prometheus metrics at GET /metrics on this address too (plain HTTP, no key: keep it where only the scraper reaches it, e.g. 127.0.0.1:9464); see docs/metrics.md")
	cmd.Flags().BoolVar(&noAudit, "no-audit", false, "record no audit trail (GET /events and hutch events then answer 501); docs/audit.md")
	cmd.Flags().DurationVar(&auditKeep, "audit-retention", 30*24*time.Hour, "how long the audit trail keeps events (hutch events, GET /events; docs/audit.md); 0 keeps them for ever")
	cmd.Flags().BoolVar(&metricsAPI, "metrics-api", false, "serve Prometheus metrics at GET /metrics on --listen as well, to requests with an API key (X-API-Key, or Authorization: Bearer); see docs/metrics.md")
	cmd.Flags().StringVar(&runtimeName, "runtime", g.envOr("HUTCH_RUNTIME", "native"), "the runtime backend sandboxes run on unless their template names one: native (namespaces, cgroups, seccomp) or gvisor (gVisor's user-space kernel: a stronger boundary, memory checkpoints for pause, snapshots and fork; needs runsc); see docs/runtime.md (env HUTCH_RUNTIME)")
	cmd.Flags().StringSliceVar(&runtimes, "runtimes", nil, "the runtime backends sandboxes may run on (the --runtime among them); a create request or a template asking for another is refused (default: every one this host has)")
	cmd.Flags().StringVar(&disk, "disk", "4G", "each sandbox's disk: its writable layer lives on a file system of this size with one inode per 16 KiB, so a sandbox cannot fill the host's disk or inodes (a template's diskSizeMB overrides it; 0: no limit, not for untrusted code)")
	cmd.Flags().IntVar(&warm, "warm", 4, "sandboxes of the base template kept started ahead of demand (0: start each on demand)")
	cmd.Flags().StringToIntVar(&warmTemplates, "warm-template", nil, "warm pools of other templates, NAME=N (repeatable; base=N overrides --warm)")
	cmd.Flags().StringVar(&mcpMirror, "mcp-registry-mirror", "", "pull the images of MCP catalog servers (E2B's mcp option) from this registry (HOST[:PORT][/PATH]) in place of their own: mcp/notion comes from HOST/mcp/notion, an image of another registry from HOST/<registry>/<path> (HOST/ghcr.io/org/srv); it may be on a loopback or private address")
	cmd.Flags().StringSliceVar(&registryAllow, "registry-allow", nil, "a registry (HOST:PORT as image references write it, or HOST for every port) on a loopback or private address that template builds through the API may pull from; they pull from public addresses only otherwise (repeatable)")
	cmd.Flags().StringVar(&maxMemory, "max-memory", "0", "the most memory one sandbox may ask for itself (OpenSandbox's resourceLimits, the Go SDK's Resources); 0: a quarter of the host's")
	cmd.Flags().Float64Var(&maxCPUs, "max-cpus", 0, "the most cores one sandbox may ask for itself (OpenSandbox's resourceLimits, the Go SDK's Resources); 0: every core of the host")
	cmd.Flags().StringVar(&volumeSize, "volume-size", "10G", "each new volume's size: a file system of its own, so that sandboxes writing to it cannot fill the host's disk (0: no limit, not for untrusted code)")
	cmd.Flags().IntVar(&maxVolumes, "max-volumes-per-key", 20, "the most volumes one API key may have (0: no cap)")
	cmd.Flags().DurationVar(&snapshotTTL, "snapshot-ttl", 0, "remove a snapshot this long after it is taken, unless its request said otherwise (0: keep until deleted)")
	cmd.Flags().DurationVar(&pausedKeep, "paused-retention", 0, "kill a sandbox that has been paused this long (0: keep paused sandboxes until killed or resumed)")
	cmd.Flags().DurationVar(&readyTimeout, "ready-timeout", sandbox.DefaultReadyTimeout, "how long a create waits for a template's ready command to pass before it fails")
	cmd.Flags().BoolVar(&withNet, "network", true, "give sandboxes a network with egress policies (nftables, IPv4 forwarding); false: loopback only")
	cmd.Flags().StringVar(&netCIDR, "network-cidr", "10.200.0.0/16", "private range sandbox links are numbered from (a /31 each)")
	cmd.Flags().Uint32Var(&maxConns, "max-conns", 1024, "flows (conntrack entries) each sandbox may hold at once, of every kind (connections, DNS queries, pings): new ones past it are dropped (0: 1024)")
	conns.register(cmd.Flags())
	caps.register(cmd.Flags())
	cmd.Flags().StringVar(&caBundle, "ca-bundle", g.envOr("HUTCH_CA_BUNDLE", ""), "extra CA certificates every sandbox trusts, for a network whose proxy inspects TLS: a PEM `FILE`, or \"host\" for this host's own trust store; added to each sandbox's system bundle at create, with NODE_EXTRA_CA_CERTS, SSL_CERT_FILE, REQUESTS_CA_BUNDLE and PIP_CERT set for Node.js, Python and others (env HUTCH_CA_BUNDLE)")
	cmd.Flags().StringSliceVar(&dnsUpstream, "dns-upstream", nil, "DNS servers (ip:port) the sandboxes' resolver forwards to (default: the host's /etc/resolv.conf)")
	return cmd
}

// validDomain reports whether d is a DNS name: dot-separated labels of
// letters, digits and hyphens, none empty, none starting or ending with a
// hyphen.
func validDomain(d string) bool {
	if len(d) > 253 {
		return false
	}
	for _, label := range strings.Split(d, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// ensureKey adds HUTCH_API_KEY when set; otherwise, when no key exists at
// all, it creates one, prints it once and writes it to DATA_DIR/api-key.
func ensureKey(ctx context.Context, g *globals, st *store.Store) error {
	if k := os.Getenv("HUTCH_API_KEY"); k != "" {
		if _, err := st.AddKey(ctx, "HUTCH_API_KEY", k); err != nil {
			return fmt.Errorf("HUTCH_API_KEY: %w", err)
		}
		return nil
	}
	n, err := st.CountKeys(ctx)
	if err != nil || n > 0 {
		return err
	}
	key, _, err := st.CreateKey(ctx, "first key")
	if err != nil {
		return err
	}
	path := filepath.Join(g.dataDir, "api-key")
	if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
		return err
	}
	// The journal keeps what a service prints, readable by more than root
	// (the adm and systemd-journal groups): the key stays in its file.
	if toJournal(os.Stdout, g.getenv) {
		fmt.Printf("API key written to %s (not printed: this output goes to the journal)\n", path)
		return nil
	}
	fmt.Printf("API key (also in %s): %s\n", path, key)
	return nil
}

// toJournal reports whether f is the stream systemd connected to the
// journal: JOURNAL_STREAM names its device and inode ("DEV:INODE"), as
// systemd.exec(5) says to check, since a child may have inherited the
// variable with other output.
func toJournal(f *os.File, getenv func(string) string) bool {
	dev, ino, ok := strings.Cut(getenv("JOURNAL_STREAM"), ":")
	if !ok {
		return false
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return false
	}
	return dev == strconv.FormatUint(st.Dev, 10) && ino == strconv.FormatUint(st.Ino, 10)
}

// lockDataDir makes sure one server at a time owns a data dir: two would
// each expire the sandboxes and remove what they take for the other's
// half-made ones. The lock is the kernel's, so it goes with the process,
// also on kill -9.
func lockDataDir(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, "serve.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("another hutch serve is using the data dir %s", dir)
		}
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return func() { f.Close() }, nil
}
