// Package serve assembles a `hutch serve`: its store, the native runtime,
// the sandboxes' networks (links, firewall, resolver, egress proxy), the
// sandbox manager and the HTTP handler of the protocols it speaks, in the
// order they depend on each other, and takes them down in reverse. The
// command (cmd/hutch), the test fixtures (internal/server/servertest) and
// anything else that runs a control plane build it here, so there is one
// way a server is put together.
package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/builder"
	"github.com/hutch-sandbox/hutch/internal/cabundle"
	"github.com/hutch-sandbox/hutch/internal/cluster"
	"github.com/hutch-sandbox/hutch/internal/fault"
	"github.com/hutch-sandbox/hutch/internal/loopfs"
	"github.com/hutch-sandbox/hutch/internal/metrics"
	"github.com/hutch-sandbox/hutch/internal/osbexecd"
	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/runtime/backends"
	"github.com/hutch-sandbox/hutch/internal/runtime/native"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/server"
	"github.com/hutch-sandbox/hutch/internal/store"
	"github.com/hutch-sandbox/hutch/internal/template"
	"github.com/hutch-sandbox/hutch/internal/volume"
)

// Config is what a server is made of.
type Config struct {
	// DataDir holds the store, the sandboxes and their sockets.
	DataDir string
	// Templates is the template store's directory.
	Templates string
	// Domain routes Host "<port>-<id>.<domain>" to sandboxes; "" for none.
	Domain string
	// Resources are each sandbox's limits (a template's disk size
	// overrides DiskBytes). DiskBytes > 0 needs loopfs.Check.
	Resources runtime.Resources
	// MaxResources bound what a sandbox may ask for itself
	// (sandbox.Options.MaxResources).
	MaxResources runtime.Resources
	// Warm is how many sandboxes of each template are kept started ahead
	// of demand (see sandbox.Options.Warm).
	Warm map[string]int
	// MaxSandboxes and MaxPerKey cap running sandboxes (0: no cap).
	MaxSandboxes, MaxPerKey int
	// Network gives sandboxes links and egress policies; nil: loopback
	// only.
	Network *NetworkConfig
	// TuneHost raises host-wide tables sandboxes share (kernel.pty.max,
	// fs.file-max) when they are lower than sandboxes need, and turns on
	// cgroup2's favordynmods (see native.FavorDynMods).
	TuneHost bool
	// Logger gets the server's log; nil discards it.
	Logger *slog.Logger
	// SandboxBinary is what sandboxes' init and envd run (see
	// native.Options); empty: hutch itself.
	SandboxBinary string
	// Runtime is the runtime backend sandboxes run on unless their
	// template or request names another ("native", "gvisor"; "" is
	// native). See package backends.
	Runtime string
	// Runtimes are the backends sandboxes may run on (Runtime among
	// them); nil allows every backend this host has.
	Runtimes []string
	// CABundle are CA certificates every sandbox trusts beside its
	// template's (see sandbox.Options.CABundle); nil for none.
	CABundle *cabundle.Bundle
	// ReadyTimeout bounds the wait for a template's ready command (see
	// sandbox.Options.ReadyTimeout).
	ReadyTimeout time.Duration
	// VolumeSize is each volume's size limit (volume.New); 0: none.
	VolumeSize int64
	// MaxVolumesPerKey caps the volumes of one key; 0: none.
	MaxVolumesPerKey int
	// SnapshotTTL and PausedRetention are sandbox.Options'.
	SnapshotTTL, PausedRetention time.Duration
	// RegistryAllow are the registries on loopback or private addresses
	// template builds may pull from (see builder.Options.RegistryAllow).
	RegistryAllow []string
	// MCPRegistryMirror is server.Options.MCPRegistryMirror. Its registry
	// may be on a loopback or private address: the operator named it.
	MCPRegistryMirror string
	// Cluster makes the server a node of a cluster on etcd; nil: a
	// single node (its SQLite store is the whole truth).
	Cluster *ClusterConfig
	// MetricsOnAPI serves the Prometheus metrics at GET /metrics of
	// Handler, to requests with an API key. Whether or not it does,
	// Server.MetricsHandler serves them for a listener of their own.
	MetricsOnAPI bool
	// AuditRetention is how long the audit trail keeps events (package
	// audit); 0 keeps them for ever.
	AuditRetention time.Duration
	// NoAudit records no audit trail (GET /events answers 501).
	NoAudit bool
	// Faults are the fault points armed: a test hook (package fault),
	// the zero value in service.
	Faults fault.Points
}

// NetworkConfig configures the sandboxes' networks.
type NetworkConfig struct {
	// CIDR is the private range sandbox links are numbered from.
	CIDR string
	// DNSUpstream are the servers the resolver forwards to; empty: the
	// host's /etc/resolv.conf.
	DNSUpstream []string
	// MaxConns caps each sandbox's flows (0: 1024).
	MaxConns uint32
}

// Server is an assembled server, its sandboxes adopted and its network
// services running. Serve its Handler on a listener (see Listen).
type Server struct {
	// Store is the server's state.
	Store *store.Store
	// Manager runs the sandboxes.
	Manager *sandbox.Manager
	// Handler serves the protocols: E2B's API and sandbox traffic.
	Handler http.Handler

	// Cluster is the node's membership of its cluster; nil for a
	// single node.
	Cluster *cluster.Node
	// Metrics are the server's Prometheus metrics (docs/metrics.md): its
	// own, each node's in a cluster.
	Metrics *metrics.Metrics
	// Audit is the server's audit trail (docs/audit.md): each node's
	// own, in a cluster.
	Audit *audit.Log

	nets      *sandboxNets
	builder   *builder.Builder
	cluster   *clusterParts
	templates *template.Store
}

// Open assembles a server from cfg: it opens the store, makes the runtime
// and the networks, adopts the sandboxes still running, and starts the
// network services. Close takes it down; sandboxes keep running.
func Open(ctx context.Context, cfg Config) (_ *Server, retErr error) {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o711); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if cfg.Resources.DiskBytes > 0 {
		if err := loopfs.Check(); err != nil {
			return nil, fmt.Errorf("sandboxes' disk limits (a disk size of 0 runs without them): %w", err)
		}
	}
	if cfg.VolumeSize > 0 {
		if err := loopfs.Check(); err != nil {
			return nil, fmt.Errorf("volumes' size limits (a volume size of 0 runs without them): %w", err)
		}
	}
	s := &Server{}
	defer func() {
		if retErr != nil {
			s.Close()
		}
	}()
	var err error
	if s.Store, err = store.Open(ctx, filepath.Join(cfg.DataDir, "hutch.db")); err != nil {
		return nil, err
	}
	templates := template.Open(cfg.Templates)
	s.templates = templates
	rt, nrt, err := backends.Open(backends.Options{DataDir: cfg.DataDir, Templates: templates, SandboxBinary: cfg.SandboxBinary, Default: cfg.Runtime, Faults: cfg.Faults, Logger: logger})
	if err != nil {
		return nil, err
	}
	// Better no server than one whose every create fails.
	if cfg.Runtimes != nil && !slices.Contains(cfg.Runtimes, rt.Default()) {
		return nil, fmt.Errorf("the default runtime %s is not among the allowed ones (%s)", rt.Default(), strings.Join(cfg.Runtimes, ", "))
	}
	for _, name := range cfg.Runtimes {
		if _, err := rt.Backend(name); err != nil {
			return nil, err
		}
	}
	if err := nrt.Reachable(); err != nil {
		return nil, err
	}
	warnStale(templates, logger)
	if cfg.TuneHost {
		tuneHost(logger)
	}
	if n := cfg.Network; n != nil {
		if s.nets, err = startNetworks(ctx, n.CIDR, n.DNSUpstream, n.MaxConns, logger); err != nil {
			return nil, err
		}
	}
	s.Metrics = metrics.New(logger)
	if !cfg.NoAudit {
		s.Audit = audit.New(audit.Options{Store: s.Store, Logger: logger, Metrics: s.Metrics, Retention: cfg.AuditRetention,
			Room: func() error { return template.RoomFor(cfg.DataDir, "the audit trail", 0) }})
	}
	vols, err := volume.NewWithCap(s.Store, cfg.DataDir, cfg.VolumeSize, cfg.MaxVolumesPerKey, logger)
	if err != nil {
		return nil, err
	}
	vols.Sweep()
	var registry sandbox.Registry
	if cfg.Cluster != nil {
		if s.cluster, err = openCluster(ctx, cfg.Cluster, cfg.DataDir, int(cfg.Resources.MemoryBytes>>20), cfg.MaxSandboxes, logger); err != nil {
			return nil, err
		}
		s.Cluster = s.cluster.node
		registry = s.Cluster
	}
	// OpenSandbox's execd, served from here through each sandbox's envd;
	// what it keeps of a sandbox goes when the sandbox does.
	execd := osbexecd.New(osbexecd.Options{Logger: logger})
	s.Manager, err = sandbox.New(sandbox.Options{
		Registry: registry,
		Runtime:  rt, Runtimes: cfg.Runtimes, Store: s.Store, Templates: templates, DataDir: cfg.DataDir, Logger: logger,
		Resources: cfg.Resources, MaxResources: cfg.MaxResources, Warm: cfg.Warm, Network: s.nets.manager(),
		MaxSandboxes: cfg.MaxSandboxes, MaxPerKey: cfg.MaxPerKey, CABundle: cfg.CABundle, ReadyTimeout: cfg.ReadyTimeout,
		SnapshotTTL: cfg.SnapshotTTL, PausedRetention: cfg.PausedRetention,
		Volumes: vols, Metrics: s.Metrics, Faults: cfg.Faults, Removed: execd.Forget,
	})
	if err != nil {
		return nil, err
	}
	// What exists is read from the manager at each scrape.
	if err := s.Metrics.Register(metrics.NewCensusCollector(s.Manager.Census)); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	if err := s.Manager.Recover(ctx); err != nil {
		return nil, fmt.Errorf("adopt running sandboxes: %w", err)
	}
	if s.nets != nil {
		if err := s.nets.serve(ctx); err != nil {
			return nil, err
		}
	}
	allow := cfg.RegistryAllow
	if cfg.MCPRegistryMirror != "" {
		host, _, _ := strings.Cut(cfg.MCPRegistryMirror, "/")
		allow = append(slices.Clone(allow), host)
	}
	s.builder = builder.New(builder.Options{Store: templates, Manager: s.Manager, CABundle: cfg.CABundle, RegistryAllow: allow, Metrics: s.Metrics, Faults: cfg.Faults, Logger: logger})
	srv := server.New(server.Options{Manager: s.Manager, Domain: cfg.Domain, Logger: logger, Templates: templates, Builder: s.builder, Volumes: vols, Cluster: s.Cluster,
		Metrics: s.Metrics, MetricsOnAPI: cfg.MetricsOnAPI, Audit: s.Audit, Execd: execd,
		MCPRegistryMirror: cfg.MCPRegistryMirror})
	s.Handler = srv
	if s.cluster != nil {
		s.cluster.serve(s, s.Cluster.PeerHandler(srv.Forwarded()), logger)
	}
	return s, nil
}

// Close stops the manager, the network services and the store, in that
// order. Sandboxes keep running: the next Open adopts them.
func (s *Server) Close() error {
	var errs []error
	if s.builder != nil {
		s.builder.Close()
	}
	// The node first: it reads the manager's sandboxes.
	s.cluster.close()
	if s.Manager != nil {
		s.Manager.Close()
	}
	if s.nets != nil {
		s.nets.close()
	}
	// Its last events go before the store does.
	s.Audit.Close()
	if s.Store != nil {
		errs = append(errs, s.Store.Close())
	}
	return errors.Join(errs...)
}

// warnStale logs each template built from another recipe than this
// binary's: an upgraded hutch serves the old template (the base one
// without python and pip, say) until it is rebuilt, which takes minutes
// and a Debian mirror, so it is said rather than done here.
func warnStale(templates *template.Store, logger *slog.Logger) {
	ts, err := templates.List()
	if err != nil {
		logger.Warn("templates", "err", err)
		return
	}
	for _, t := range ts {
		if stale, err := templates.Stale(t.Name); err != nil {
			logger.Warn("templates", "template", t.Name, "err", err)
		} else if stale {
			logger.Warn("template built from an older recipe: sandboxes get the old one until it is rebuilt",
				"template", t.Name, "rebuild", "hutch template build "+t.Name+" (or ./scripts/setup.sh)")
		}
	}
}

// tuneHost raises the host-wide tables sandboxes share.
func tuneHost(logger *slog.Logger) {
	// Each sandbox may hold native.MaxPtys terminals; the host-wide pool
	// must not run dry before a thousand sandboxes do.
	if old, now, err := native.EnsurePtyPool(1024); err != nil {
		logger.Warn("terminals", "err", err)
	} else if now != old {
		logger.Info("raised kernel.pty.max", "from", old, "to", now)
	}
	// Open files are charged to each sandbox's memory; the host-wide count
	// must not be the tighter limit (see EnsureFileMax).
	if old, now, err := native.EnsureFileMax(); err != nil {
		logger.Warn("open files", "err", err)
	} else if now != old {
		logger.Info("raised fs.file-max", "from", old, "to", now)
	}
	// Every sandbox's tasks take host pids; many sandboxes' limits
	// together must not exceed the host's table (see EnsurePidMax).
	if old, now, err := native.EnsurePidMax(); err != nil {
		logger.Warn("pids", "err", err)
	} else if now != old {
		logger.Info("raised kernel.pid_max", "from", old, "to", now)
	}
	// Moving each new sandbox into its cgroups otherwise waits for an RCU
	// grace period or more.
	if on, err := native.FavorDynMods(); err != nil {
		logger.Warn("cgroup favordynmods (sandbox starts wait on cgroup moves)", "err", err)
	} else if !on {
		logger.Info("no cgroup2 mount: cgroup favordynmods left off")
	}
}
