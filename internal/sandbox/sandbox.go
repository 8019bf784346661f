// Package sandbox is the lifecycle of the control plane's sandboxes: it
// creates them with the runtime, starts and initialises their envd, records
// them in the store, expires them at their timeout, and, after a restart of
// `hutch serve`, adopts every sandbox that still runs.
//
// A sandbox here is a runtime sandbox whose first process is envd, reached
// through a unix socket the manager creates in DataDir/sockets and hands to
// envd (so nothing in the sandbox can write a host path).
package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hutch-sandbox/hutch/internal/cabundle"
	"github.com/hutch-sandbox/hutch/internal/envdapi"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/fault"
	"github.com/hutch-sandbox/hutch/internal/metrics"
	"github.com/hutch-sandbox/hutch/internal/network"
	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/store"
	"github.com/hutch-sandbox/hutch/internal/template"
	"github.com/hutch-sandbox/hutch/internal/volume"
)

// DefaultTemplate is the template of create requests that name none.
const DefaultTemplate = "base"

// DefaultTimeout is a sandbox's life when the create request names none.
const DefaultTimeout = 300 * time.Second

// Options configure a Manager.
type Options struct {
	Runtime   runtime.Runtime
	Store     *store.Store
	Templates *template.Store
	// DataDir holds the envd sockets (DataDir/sockets).
	DataDir string
	// Resources are every sandbox's limits; a template's DiskSizeMB, when
	// set, replaces DiskBytes for its sandboxes.
	Resources runtime.Resources
	// MaxResources bound what a create may ask for itself
	// (CreateRequest.Resources): CPUs and MemoryBytes; zero fields mean
	// this host's cores and a quarter of its memory (never less than
	// Resources').
	MaxResources runtime.Resources
	// Network gives sandboxes their network and enforces their egress
	// policy; nil leaves every sandbox with loopback only.
	Network *network.Manager
	// Warm is how many sandboxes of each template are kept started ahead
	// of demand (a warm pool per template named), so that creating one
	// costs milliseconds; a template not named, or named with 0, starts
	// every sandbox on demand. The pools start with Recover.
	Warm map[string]int
	// MaxSandboxes caps the sandboxes running at once, all keys together;
	// MaxPerKey caps those of one key (see limits.go for what counts). A
	// Create past either fails with a *LimitError. 0: no cap.
	MaxSandboxes, MaxPerKey int
	// ReadyTimeout bounds the wait for a template's ready command;
	// 0 means DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// SnapshotTTL is how long a snapshot is kept when its request gave
	// no retention; 0 keeps it until it is deleted.
	SnapshotTTL time.Duration
	// PausedRetention removes a sandbox paused that long; 0 keeps paused
	// sandboxes until they are killed or resumed.
	PausedRetention time.Duration
	// CABundle, when not nil, are CA certificates every sandbox trusts
	// beside its template's own: envd installs them at the /init of each
	// create (so a warm sandbox gets them when it is handed out, not when
	// it is started), see cabundle.Install.
	CABundle *cabundle.Bundle
	// Volumes finds the volumes create requests name; nil refuses every
	// request that names one (errdefs.ErrNotImplemented).
	Volumes *volume.Manager
	// Runtimes are the runtime backends sandboxes may run on, by name
	// (the default one among them); nil allows every backend Runtime has.
	// A request, or a template, for another is refused: an operator who
	// made gvisor the default can keep every sandbox on it.
	Runtimes []string
	// Registry, in a cluster, records this node's sandboxes for every
	// node to list and route to (see Registry); nil for a single node.
	Registry Registry
	// Metrics counts creates, kills, pauses, resumes and warm pool takes
	// as they happen (what exists is read at scrape time: Census); nil
	// counts nothing.
	Metrics *metrics.Metrics
	// Faults are the fault points armed (a test hook, package fault):
	// the server kills itself at each step named.
	Faults fault.Points
	// Removed, when set, is called with the id of each sandbox removed
	// for good (killed, expired, ended), once its record is gone: what
	// other parts keep per sandbox (OpenSandbox's execd, its command
	// logs) goes with it.
	Removed func(id string)
	Logger  *slog.Logger
}

// Manager runs the sandboxes of one control plane. It is safe for
// concurrent use.
type Manager struct {
	rt        runtime.Runtime
	store     *store.Store
	templates *template.Store
	sockets   string
	// checkpoints holds the checkpoints of sandboxes paused with their
	// memory, and of snapshots with it (checkpoint.go).
	checkpoints string
	runtimes    []string // see Options.Runtimes
	resources   runtime.Resources
	caBundle    string // PEM; "" for none
	volumes     *volume.Manager
	bundle      *cabundle.Bundle
	reg         Registry // see Options.Registry; nil for none
	metrics     *metrics.Metrics
	maxTotal    int // Options.MaxSandboxes, for Census
	logger      *slog.Logger

	mu  sync.Mutex
	ops map[string]*opLock // see lockOp
	// dropping are the sandboxes paused into a checkpoint whose runtime
	// sandbox is still being deleted (pauseCheckpoint): a resume waits.
	dropping map[string]chan struct{}
	timers   map[string]*time.Timer
	live     map[string]*live // every sandbox this manager runs
	pools    map[string]*pool // warm pools by template; nil until Recover
	net      *network.Manager
	warm     map[string]int
	// cold counts creates starting a sandbox on demand: refills wait
	// while there are any (pool.go).
	cold atomic.Int32
	// The caps on running sandboxes and what holds them (limits.go):
	// run counts, per key, running sandboxes and creates in flight;
	// frozen, the sandboxes paused with their memory.
	run, frozen *slots
	// ctx ends with Close: it stops the sampler, the pool and the watches.
	ctx          context.Context
	cancel       context.CancelFunc
	readyTimeout time.Duration // see Options.ReadyTimeout
	// snapshotTTL and pausedTTL are Options.SnapshotTTL and PausedRetention.
	snapshotTTL, pausedTTL time.Duration
	// crash, set by tests only, is called at each step of pause, resume,
	// snapshot and fork (see step): a test makes it end the goroutine there,
	// as a server killed at that step would stop.
	crash func(step string)
	// faults are Options.Faults.
	faults fault.Points
	// removed is Options.Removed.
	removed func(id string)
	// maxResources is Options.MaxResources, its zero fields filled in.
	maxResources runtime.Resources
}

// step marks a point of a create, kill, pause, resume, snapshot or fork
// where a server may be killed (a fault.Steps name): an armed fault point
// kills the process there, a unit test's crash stops the call.
func (m *Manager) step(name string) {
	m.faults.At(name)
	if m.crash != nil {
		m.crash(name)
	}
}

// live is what the manager keeps of a running sandbox.
type live struct {
	keyID string // whose slot it holds
	sbx   runtime.Sandbox
	// internal marks a sandbox of Hutch's own (CreateRequest.Internal),
	// which nothing routes to.
	internal bool
	// paused is a sandbox paused (pause.go): frozen, keeping its slot,
	// routed to by nothing; pausing is one being paused, resumed or
	// removed at its timeout.
	paused, pausing bool
	// autoResume resumes it when traffic comes for it while paused (Wake).
	autoResume bool
	route      *route
	metrics    *series
	// trafficToken and maskHost are the inbound rules of its ports.
	trafficToken, maskHost string
}

// New returns a manager; call Recover before serving (it also starts the
// warm pool).
func New(opts Options) (*Manager, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	sockets := filepath.Join(opts.DataDir, "sockets")
	if err := os.MkdirAll(sockets, 0o700); err != nil {
		return nil, fmt.Errorf("sockets dir: %w", err)
	}
	checkpoints := filepath.Join(opts.DataDir, "checkpoints")
	if err := os.MkdirAll(checkpoints, 0o700); err != nil {
		return nil, fmt.Errorf("checkpoints dir: %w", err)
	}
	m := &Manager{
		rt: opts.Runtime, store: opts.Store, templates: opts.Templates, sockets: sockets, checkpoints: checkpoints, runtimes: opts.Runtimes,
		resources: opts.Resources, maxResources: maxResources(opts.Resources, opts.MaxResources), logger: logger, timers: map[string]*time.Timer{}, ops: map[string]*opLock{}, dropping: map[string]chan struct{}{}, live: map[string]*live{}, warm: opts.Warm, net: opts.Network,
		run: newSlots(opts.MaxPerKey, opts.MaxSandboxes, false), frozen: newSlots(opts.MaxPerKey, opts.MaxSandboxes, true),
		readyTimeout: opts.ReadyTimeout, volumes: opts.Volumes, reg: opts.Registry, snapshotTTL: opts.SnapshotTTL, pausedTTL: opts.PausedRetention,
		metrics: opts.Metrics, maxTotal: opts.MaxSandboxes, faults: opts.Faults, removed: opts.Removed,
	}
	if m.readyTimeout <= 0 {
		m.readyTimeout = DefaultReadyTimeout
	}
	if m.reg != nil {
		m.store.OnChange(m.republish)
	}
	if opts.CABundle != nil {
		m.caBundle = string(opts.CABundle.PEM())
		m.bundle = opts.CABundle
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	go m.sampleLoop()
	go m.sweepLoop(time.Minute)
	return m, nil
}

// CreateRequest is what a new sandbox is made from.
type CreateRequest struct {
	KeyID    string
	Template string        // "" means DefaultTemplate
	Timeout  time.Duration // 0 means DefaultTimeout
	Metadata map[string]string
	Envs     map[string]string
	// Secure makes envd require an access token (returned in the record).
	Secure    bool
	Network   Network
	Lifecycle Lifecycle
	// Volumes are mounted into the sandbox, by name (VolumeID is
	// ignored): each must be a volume of KeyID, each Path a mount path
	// runtime.CheckMountTarget accepts, no two the same.
	Volumes []VolumeMount
	// Internal makes a sandbox of Hutch's own (a template build's step):
	// it holds a slot of KeyID but is not recorded, listed, or reachable
	// through the API or the edge router, only through Exec,
	// CaptureLayer and Discard. A restarted server sweeps it as an orphan.
	Internal bool
	// Runtime names the runtime backend to run the sandbox on ("gvisor");
	// empty is the template's, else the server's default. A template that
	// needs another refuses it.
	Runtime string
	// Resources, when not zero, are the sandbox's own CPU and memory in
	// place of the server's defaults (within this host's: CheckResources).
	// Such a sandbox always starts on demand, never from the warm pool.
	Resources Resources
	// Image is recorded as the image reference Template was imported
	// from, for the caller that imported it.
	Image string
	// Entrypoint, when set, is started in the background as the
	// sandbox's main process (argv, no shell) once envd serves, as the
	// template's default user; a create whose entrypoint cannot start
	// fails. A resume that boots the sandbox again starts it again.
	Entrypoint []string
	// Images are image roots shown in the sandbox (Build is filled in):
	// each Template must be one KeyID may use, each Path a mount path
	// runtime.CheckMountTarget accepts. Such a sandbox always starts on
	// demand, never from the warm pool.
	Images []ImageMount
	// alias, when set, is reported as the name the template was asked
	// for by (a fork's: its source's, not its build's id).
	alias string
}

// runtimeInfo is what the store keeps for re-adopting a sandbox: its
// envd's API and control sockets (Control is empty for a sandbox made
// before envd had one).
type runtimeInfo struct {
	Socket  string `json:"socket,omitempty"`
	Control string `json:"control,omitempty"`
	// PausedBuild is the template store build that holds the files of a
	// sandbox paused without its memory (which has no sockets then), and
	// PausedAt when it was paused.
	PausedBuild string    `json:"pausedBuild,omitempty"`
	PausedAt    time.Time `json:"pausedAt,omitzero"`
	// Backend is the runtime backend the sandbox runs on ("" for records
	// made before there were two: the default one).
	Backend string `json:"backend,omitempty"`
	// Checkpoint is the checkpoint of a sandbox paused with its memory on
	// a backend that saves it to disk (checkpoint.go), and Build the
	// template build it ran on.
	Checkpoint string `json:"checkpoint,omitempty"`
	Build      string `json:"build,omitempty"`
}

// ErrPrivateInsecure is Create's error for a sandbox closed to public
// traffic (Network.AllowPublicTraffic false) that is not Secure: its ports
// would need the traffic token, yet anyone who can reach the router could
// run a command through its token-less envd and read them from inside.
// E2B refuses the same request. It matches errdefs.ErrInvalidArgument.
var ErrPrivateInsecure = fmt.Errorf("a sandbox closed to public traffic needs envd's access token (secure): %w", errdefs.ErrInvalidArgument)

// Create makes a sandbox, waits until its envd answers, and records it.
// envd is reachable when Create returns, as the SDKs expect. The request
// is checked before anything starts: a private sandbox that is not Secure
// is refused with ErrPrivateInsecure, egress rules that do not parse with an
// errdefs.ErrInvalidArgument that starts "network: ", and past a cap on
// running sandboxes (Options.MaxSandboxes, MaxPerKey) it returns a
// *LimitError.
func (m *Manager) Create(ctx context.Context, req CreateRequest) (*Sandbox, error) {
	start := time.Now()
	path := metrics.PathCold
	sb, err := m.create(ctx, req, &path)
	if !req.Internal {
		// A build's step is no sandbox anyone asked for: not counted.
		m.metrics.Create(path, time.Since(start), err)
	}
	return sb, err
}

// create is Create; it sets *path to how the sandbox came to run
// (metrics.PathPool, PathSnapshot; it is left as it is for a start on
// demand).
func (m *Manager) create(ctx context.Context, req CreateRequest, path *string) (_ *Sandbox, retErr error) {
	if m.reg != nil && !req.Internal {
		if err := m.reg.Ready(); err != nil {
			return nil, err
		}
	}
	if req.Network.Private() && !req.Secure {
		return nil, ErrPrivateInsecure
	}
	if req.Lifecycle.AutoResume && req.Lifecycle.OnTimeout != OnTimeoutPause {
		return nil, fmt.Errorf("autoResume needs the sandbox paused at its timeout (autoPause): %w", errdefs.ErrInvalidArgument)
	}
	if req.Lifecycle.OnTimeout == "" {
		req.Lifecycle.OnTimeout = OnTimeoutKill
	}
	if err := m.CheckResources(req.Resources); err != nil {
		return nil, err
	}
	if err := CheckEntrypoint(req.Entrypoint); err != nil {
		return nil, err
	}
	// The policy is parsed once, here; Recover parses it again from the
	// record, after a restart.
	egress, err := parseEgress(req.Network)
	if err != nil {
		return nil, err
	}
	// holdVolumes fills in the volumes' ids: in a copy, not the caller's.
	req.Volumes = slices.Clone(req.Volumes)
	mounts, releaseVolumes, err := m.holdVolumes(ctx, req)
	if err != nil {
		return nil, err
	}
	// Until the record names the volumes, which then keeps them.
	defer releaseVolumes()
	req.Images = slices.Clone(req.Images)
	images, err := m.imageRoots(req.KeyID, req.Images, true)
	if err != nil {
		return nil, err
	}
	if req.Template == "" {
		req.Template = DefaultTemplate
	}
	tpl, err := m.templates.Get(req.Template)
	if err != nil {
		return nil, err
	}
	if err := tpl.MayUse(req.KeyID); err != nil {
		return nil, err
	}
	if s := tpl.Snapshot; s != nil && s.Kind == template.SnapshotPause {
		// A paused sandbox's files are its own, resumed by a connect.
		return nil, fmt.Errorf("template %q does not exist: %w", req.Template, errdefs.ErrNotFound)
	} else if s != nil && s.Kind == template.SnapshotUser && len(tpl.Tags) == 0 {
		// Deleted; a sandbox made from it still keeps its build.
		return nil, errSnapshotGone(req.Template)
	}
	alias := req.Template
	if req.alias != "" {
		alias = req.alias
	}
	if req.Timeout == 0 {
		req.Timeout = DefaultTimeout
	}
	if req.Timeout < 0 {
		return nil, fmt.Errorf("timeout %v: %w", req.Timeout, errdefs.ErrInvalidArgument)
	}
	// The slot first, before anything is started: concurrent creates
	// cannot overshoot the caps. adopt hands it to the sandbox.
	if err := m.reserve(req.KeyID); err != nil {
		return nil, err
	}
	adopted := false
	defer func() {
		if retErr != nil && !adopted {
			m.release(req.KeyID)
		}
	}()
	backend, err := m.backendFor(tpl, req.Runtime)
	if err != nil {
		return nil, err
	}
	var st *started
	if tpl.Snapshot != nil {
		*path = metrics.PathSnapshot
	}
	var pool string // the warm pool looked in, if any
	if tpl.Checkpoint != "" {
		// A snapshot with its memory: restored, its processes going on (it
		// mounts the volumes its source did).
		if st, err = m.restoreAs(ctx, newID(), tpl.Checkpoint, backend); err != nil {
			return nil, err
		}
	} else if len(mounts) == 0 && len(images) == 0 && backend == tpl.Runtime && req.Resources.IsZero() {
		// A warm sandbox was started without mounts, on the template's
		// backend, with the server's resources: one with volumes, asked
		// for on another backend or with resources of its own always
		// starts on demand.
		st, pool = m.takeWarm(req.Template, tpl)
	}
	if st != nil && !st.alive(ctx) {
		// Its envd died while it waited in the pool.
		st.discard()
		st = nil
	}
	if pool != "" {
		if !req.Internal {
			m.metrics.PoolTake(pool, st != nil)
		}
		if st != nil {
			*path = metrics.PathPool
		}
	}
	if st == nil {
		// Until this create is done: its sandbox's envd still starts.
		m.cold.Add(1)
		defer m.cold.Add(-1)
		if st, err = m.startOn(ctx, newID(), tpl, attached{mounts, images}, backend, req.Resources); err != nil {
			return nil, err
		}
	}
	defer func() {
		if retErr != nil {
			st.discard()
		}
	}()
	m.step(fault.CreateStarted)

	sb := &Sandbox{
		ID: st.sbx.ID(), TemplateID: tpl.Name, Alias: alias, KeyID: req.KeyID, State: StateRunning,
		EnvdVersion: envdapi.Version, Secure: req.Secure,
		Limits:  m.limitsOf(tpl, req.Resources),
		Network: req.Network, Lifecycle: req.Lifecycle,
		Metadata: orEmpty(req.Metadata), Envs: orEmpty(req.Envs), StartedAt: time.Now().UTC(),
		Volumes: req.Volumes, Image: req.Image, Entrypoint: slices.Clone(req.Entrypoint),
		Images: req.Images,
	}
	sb.EndAt = sb.StartedAt.Add(req.Timeout)
	if req.Secure {
		sb.EnvdAccessToken = randomHex(32)
	}
	if req.Network.Private() {
		sb.TrafficAccessToken = randomHex(32)
	}
	// A sandbox restored from a snapshot has its source's envd token
	// until the /init below.
	if err := m.attachNetwork(ctx, st.sbx, st.route, egress, st.prevToken); err != nil {
		return nil, err
	}
	defer func() {
		// A create that fails after the network was attached (the client
		// went away, say) must not leave its firewall chain behind.
		if retErr != nil && m.net != nil {
			m.net.Detach(context.Background(), st.sbx.ID())
		}
	}()
	if err := m.initEnvdAs(ctx, st.route, sb, tpl, st.prevToken); err != nil {
		return nil, err
	}
	if err := startEntrypoint(ctx, st.route, sb.EnvdAccessToken, sb.Entrypoint); err != nil {
		return nil, err
	}
	info, _ := json.Marshal(runtimeInfo{Socket: st.route.api, Control: st.route.control, Backend: st.backend})
	sb.Runtime = st.backend
	// Live before recorded: from the moment the API can list it, a kill
	// finds it (and gives back its slot), never a record whose sandbox
	// the manager does not know yet.
	m.adopt(st.sbx, st.route, sb, req.Internal)
	adopted = true
	if req.Internal {
		return sb, nil
	}
	m.step(fault.CreateInitialized)
	if m.reg != nil {
		// Claimed before it is recorded here: a sandbox whose id the
		// cluster has is never recorded twice.
		if err := m.reg.Claim(ctx, sb); err != nil {
			m.unadopt(sb.ID)
			return nil, err
		}
	}
	if err := m.store.CreateSandbox(ctx, toRecord(sb, string(info))); err != nil {
		m.unadopt(sb.ID)
		if m.reg != nil {
			m.reg.Delete(context.WithoutCancel(ctx), sb.ID)
		}
		return nil, err
	}
	m.step(fault.CreateRecorded)
	return sb, nil
}

// holdVolumes checks req's volume mounts, fills in their VolumeIDs, and
// holds the volumes (volume.Manager.Hold) until release is called. It
// returns what the runtime mounts. A request without volumes holds
// nothing.
func (m *Manager) holdVolumes(ctx context.Context, req CreateRequest) (_ []runtime.Mount, release func(), _ error) {
	if len(req.Volumes) == 0 {
		return nil, func() {}, nil
	}
	if m.volumes == nil {
		return nil, nil, fmt.Errorf("volumes are not enabled on this server: %w", errdefs.ErrNotImplemented)
	}
	names := make([]string, len(req.Volumes))
	seen := map[string]bool{}
	for i, v := range req.Volumes {
		if err := runtime.CheckMountTarget(v.Path); err != nil {
			return nil, nil, fmt.Errorf("volume %q: %w", v.Name, err)
		}
		p := filepath.Clean(v.Path)
		if seen[p] {
			return nil, nil, fmt.Errorf("two volumes mounted at %s: %w", p, errdefs.ErrInvalidArgument)
		}
		seen[p] = true
		names[i] = v.Name
	}
	vols, release, err := m.volumes.Hold(ctx, req.KeyID, names)
	if err != nil {
		return nil, nil, err
	}
	mounts := make([]runtime.Mount, len(vols))
	for i, v := range vols {
		req.Volumes[i].VolumeID = v.ID
		req.Volumes[i].Path = filepath.Clean(req.Volumes[i].Path)
		mounts[i] = runtime.Mount{Source: v.Dir, Target: req.Volumes[i].Path}
	}
	return mounts, release, nil
}

// mountsOf is what the runtime mounts for the volumes of sb, a recorded
// sandbox booted again (a resume without memory): its record keeps the
// volumes in use, so they still exist.
func (m *Manager) mountsOf(sb *Sandbox) ([]runtime.Mount, error) {
	if len(sb.Volumes) == 0 {
		return nil, nil
	}
	if m.volumes == nil {
		return nil, fmt.Errorf("it mounts volumes, and volumes are not enabled on this server: %w", errdefs.ErrNotImplemented)
	}
	var out []runtime.Mount
	for _, v := range sb.Volumes {
		out = append(out, runtime.Mount{Source: m.volumes.Dir(v.VolumeID), Target: v.Path})
	}
	return out, nil
}

// attached is what a sandbox shows of the host besides its template:
// volumes and image roots.
type attached struct {
	mounts []runtime.Mount
	images []runtime.ImageRoot
}

// imageRoots checks the image mounts of a sandbox of keyID and returns
// what the runtime shows for them. On create (fill), it looks each
// template up and fills in its Build; a resume shows the builds recorded.
func (m *Manager) imageRoots(keyID string, ims []ImageMount, fill bool) ([]runtime.ImageRoot, error) {
	var out []runtime.ImageRoot
	seen := map[string]bool{}
	for i, im := range ims {
		if err := runtime.CheckMountTarget(im.Path); err != nil {
			return nil, err
		}
		p := filepath.Clean(im.Path)
		if seen[p] {
			return nil, fmt.Errorf("two images at %s: %w", p, errdefs.ErrInvalidArgument)
		}
		seen[p] = true
		var binds []runtime.ImageBind
		for _, b := range im.Binds {
			binds = append(binds, runtime.ImageBind{From: b.From, To: b.To, ReadOnly: b.ReadOnly})
		}
		ref := im.Build
		if fill {
			ref = im.Template
		}
		tpl, err := m.templates.Get(ref)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", im.Template, err)
		}
		if err := tpl.MayUse(keyID); err != nil {
			return nil, fmt.Errorf("image %s: %w", im.Template, err)
		}
		if tpl.Checkpoint != "" {
			return nil, fmt.Errorf("image %s is a snapshot with its memory, not an image: %w", im.Template, errdefs.ErrInvalidArgument)
		}
		ims[i].Build, ims[i].Path = tpl.ID, p
		cfg, _ := json.Marshal(ImageConfig{Cmd: tpl.Cmd, Entrypoint: tpl.Entrypoint, Env: tpl.Env, WorkingDir: tpl.DefaultWorkdir, User: tpl.DefaultUser})
		out = append(out, runtime.ImageRoot{Build: tpl.ID, Layers: tpl.LowerDirs(), Target: p, Config: cfg, Binds: binds})
	}
	if err := runtime.CheckImages(out); err != nil {
		return nil, err
	}
	return out, nil
}

// orEmpty is m, or an empty map for nil: a sandbox's maps are never nil.
func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// unadopt undoes adopt for a create that failed after it: the sandbox is
// no longer routable or timed, and its slot is given back, unless its
// removal (its envd ended) did both already.
func (m *Manager) unadopt(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.live[id]; l != nil {
		delete(m.live, id)
		m.releaseLiveLocked(l)
	}
	if t := m.timers[id]; t != nil {
		t.Stop()
		delete(m.timers, id)
	}
}

// started is a sandbox whose envd runs but has not been given to anyone:
// no token, no environment, no record.
type started struct {
	sbx     runtime.Sandbox
	route   *route
	build   string // its template's build id, to tell a stale warm sandbox
	backend string // the runtime backend it runs on
	// prevToken is the envd access token a sandbox restored from a
	// snapshot's checkpoint has until its /init (its source's).
	prevToken string
}

// alive reports whether the sandbox still runs.
func (s *started) alive(ctx context.Context) bool {
	st, err := s.sbx.Status(ctx)
	return err == nil && st.State == runtime.StateRunning
}

// discard kills a started sandbox and removes its sockets.
func (s *started) discard() {
	s.route.close()
	s.sbx.Delete(context.Background())
	os.Remove(s.route.api)
	os.Remove(s.route.control)
}

// start makes a sandbox of tpl with envd as its first process, serving the
// two sockets the manager made in DataDir/sockets (see route): the control
// socket as descriptor 3, the API socket as 4.
func (m *Manager) start(ctx context.Context, tpl *template.Template, mounts []runtime.Mount) (_ *started, retErr error) {
	return m.startOn(ctx, newID(), tpl, attached{mounts: mounts}, tpl.Runtime, Resources{})
}

// startAs is start with the sandbox's id given: a sandbox paused without
// its memory comes back under its own.
func (m *Manager) startAs(ctx context.Context, id string, tpl *template.Template, mounts []runtime.Mount) (_ *started, retErr error) {
	return m.startOn(ctx, id, tpl, attached{mounts: mounts}, tpl.Runtime, Resources{})
}

// envdSockets makes sandbox id's envd sockets: listening, in this order
// (descriptors envdapi.ControlFD and APIFD of envd). The caller closes
// the files, and removes the sockets if the sandbox is not made.
func (m *Manager) envdSockets(id string) (api, control string, files []*os.File, _ error) {
	api, control = m.socketPaths(id)
	for _, path := range []string{control, api} {
		ln, err := net.Listen("unix", path)
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return "", "", nil, fmt.Errorf("envd socket: %w", err)
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		f, err := ln.(*net.UnixListener).File()
		ln.Close()
		if err != nil {
			return "", "", nil, fmt.Errorf("envd socket: %w", err)
		}
		files = append(files, f)
	}
	return api, control, files, nil
}

// startOn is startAs on runtime backend backend ("" for the default),
// with the sandbox's own resources own (zero: the server's).
func (m *Manager) startOn(ctx context.Context, id string, tpl *template.Template, with attached, backend string, own Resources) (_ *started, retErr error) {
	if err := m.dataRoom(); err != nil {
		return nil, err
	}
	api, control, files, err := m.envdSockets(id)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
		if retErr != nil {
			os.Remove(api)
			os.Remove(control)
		}
	}()
	sbx, err := m.rt.Create(ctx, runtime.Spec{
		ID: id, Runtime: backend, Template: tpl.ID, Resources: m.resourcesOf(tpl, own),
		Labels: map[string]string{controlPlaneLabel: "true"}, Mounts: with.mounts, Images: with.images,
		Process: runtime.Process{
			Args: envdapi.Command(runtime.SelfExe, tpl.DefaultUser),
			User: "root", ExtraFiles: files,
		},
	})
	if err != nil {
		return nil, err
	}
	st := &started{sbx: sbx, route: newRoute(api, control), build: tpl.ID, backend: m.backendName(backend)}
	if st.backend == "" {
		// A single backend, not a runtime.Set: it says its name.
		if s, err := sbx.Status(ctx); err == nil {
			st.backend = s.Runtime
		}
	}
	// A template's start command runs, and its ready command passes,
	// before anyone gets the sandbox: a warm pool holds ready ones.
	if err := m.startCommand(ctx, st.route, tpl); err != nil {
		st.discard()
		return nil, err
	}
	return st, nil
}

// resourcesOf returns the limits of a sandbox of tpl with resources own.
func (m *Manager) resourcesOf(tpl *template.Template, own Resources) runtime.Resources {
	r := m.resources
	if tpl.DiskSizeMB > 0 {
		r.DiskBytes = int64(tpl.DiskSizeMB) << 20
	}
	if own.CPUMillis > 0 {
		r.CPUs = float64(own.CPUMillis) / 1000
	}
	if own.MemoryMB > 0 {
		r.MemoryBytes = int64(own.MemoryMB) << 20
	}
	return r
}

// limitsOf is what a sandbox of tpl with resources own is granted, as
// the API reports it.
func (m *Manager) limitsOf(tpl *template.Template, own Resources) Limits {
	r := m.resourcesOf(tpl, own)
	return Limits{CPUs: int(math.Ceil(max(r.CPUs, 1))), CPUMillis: own.CPUMillis,
		MemoryMB: int(r.MemoryBytes >> 20), DiskMB: int(r.DiskBytes >> 20)}
}

// cpuOf is defaults with sb's own CPU quota, if it asked for one: its
// metrics count the cores it may use.
func cpuOf(sb *Sandbox, defaults runtime.Resources) runtime.Resources {
	if sb.Limits.CPUMillis > 0 {
		defaults.CPUs = float64(sb.Limits.CPUMillis) / 1000
	}
	return defaults
}

// ownResources is what sb was granted: a sandbox booted again (a resume
// of its files) keeps it, even if the server's defaults changed since.
func ownResources(sb *Sandbox) Resources {
	return Resources{CPUMillis: sb.Limits.CPUMillis, MemoryMB: sb.Limits.MemoryMB}
}

// adopt makes a running sandbox routable, starts sampling it and arms its
// expiry; a paused one (recovered) is sampled, neither routed nor timed.
func (m *Manager) adopt(sbx runtime.Sandbox, rt *route, sb *Sandbox, internal bool) {
	end := sb.EndAt
	rt.setToken(sb.EnvdAccessToken)
	l := &live{keyID: sb.KeyID, sbx: sbx, internal: internal, paused: sb.State == StatePaused, autoResume: sb.Lifecycle.AutoResume,
		route: rt, metrics: newSeries(sbx, cpuOf(sb, m.resources)), trafficToken: sb.TrafficAccessToken, maskHost: sb.Network.MaskRequestHost}
	m.mu.Lock()
	m.live[sbx.ID()] = l
	m.mu.Unlock()
	m.schedule(sbx.ID(), end) // none for a paused one (schedule)
	go m.watch(sbx)
	// A first sample at once, so metrics are never empty for long.
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), metricsInterval)
		defer cancel()
		l.metrics.sample(ctx, time.Now())
	}()
}

// watch removes a sandbox whose first process, its envd, ended on its own
// (killed from inside, say): it is reported gone at once, not half-alive
// until its timeout.
func (m *Manager) watch(sbx runtime.Sandbox) {
	if _, err := sbx.Wait(m.ctx); err != nil {
		return // the manager is closing, or the sandbox is not ours to wait on
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Under the sandbox's lock: a pause of its files deletes the runtime
	// sandbox on purpose, and a resume makes a new one of the same id.
	unlock, err := m.lockOp(ctx, sbx.ID())
	if err != nil {
		return
	}
	defer unlock()
	m.mu.Lock()
	l := m.live[sbx.ID()]
	m.mu.Unlock()
	if l == nil || l.sbx != sbx {
		return // killed, expired or paused through the manager
	}
	m.logger.Info("sandbox ended: its envd exited", "id", sbx.ID())
	// Again while its record cannot be deleted (the database locked): a
	// sandbox that ended must not stay listed running. Past ctx, its
	// timeout removes it.
	for {
		err = m.removeLocked(ctx, sbx.ID())
		if err == nil || ctx.Err() != nil {
			break
		}
		m.logger.Warn("remove ended sandbox; trying again", "id", sbx.ID(), "err", err)
		select {
		case <-ctx.Done():
		case <-m.ctx.Done():
			cancel()
		case <-time.After(time.Second):
		}
	}
	m.metrics.Kill(metrics.KillEnded, err)
	if err != nil {
		m.logger.Warn("remove ended sandbox", "id", sbx.ID(), "err", err)
	}
}

// initEnvd waits for the sandbox's envd and gives it the sandbox-wide
// settings: access token, environment (the template's, then the
// request's), default user and working directory (the template's), CA
// certificates.
func (m *Manager) initEnvd(ctx context.Context, rt *route, sb *Sandbox, tpl *template.Template) error {
	return m.initEnvdAs(ctx, rt, sb, tpl, "")
}

// initEnvdAs is initEnvd to an envd that has token prev already (one
// restored from a snapshot keeps its source's until this /init).
func (m *Manager) initEnvdAs(ctx context.Context, rt *route, sb *Sandbox, tpl *template.Template, prev string) error {
	env := envMap(tpl.Env)
	if env == nil {
		env = sb.Envs
	} else {
		for k, v := range sb.Envs {
			env[k] = v
		}
	}
	req := envdapi.InitRequest{AccessToken: &sb.EnvdAccessToken, EnvVars: env, DefaultUser: tpl.DefaultUser, DefaultWorkdir: tpl.DefaultWorkdir, CABundle: m.caBundle}
	client := envdapi.NewClient(rt.host)
	for {
		err := client.InitAs(ctx, prev, req)
		var se *envdapi.StatusError
		if err == nil || errors.As(err, &se) {
			return err
		}
		// Not serving yet: the socket listened before envd ran.
		select {
		case <-ctx.Done():
			return fmt.Errorf("envd did not start: %w", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// socketPaths are a sandbox's envd sockets: its API and its control socket.
func (m *Manager) socketPaths(id string) (api, control string) {
	return filepath.Join(m.sockets, id+apiSuffix), filepath.Join(m.sockets, id+controlSuffix)
}

const (
	apiSuffix     = ".sock"
	controlSuffix = ".control.sock"
)

// Template returns the built template called name, which sandboxes can be
// created from: an error wrapping errdefs.ErrNotFound when there is none,
// whether or not a template could have that name.
func (m *Manager) Template(name string) (*template.Template, error) {
	t, err := m.templates.Get(name)
	if errors.Is(err, errdefs.ErrInvalidArgument) {
		return nil, fmt.Errorf("template %q: %w", name, errdefs.ErrNotFound)
	}
	return t, err
}

// Get returns a sandbox the key may see; errdefs.ErrNotFound for one it
// may not, or none.
func (m *Manager) Get(ctx context.Context, keyID, id string) (*Sandbox, error) {
	rec, err := m.store.GetSandbox(ctx, keyID, id)
	if err != nil {
		return nil, err
	}
	return fromRecord(&rec), nil
}

// VerifyKey returns the id of the API key whose plaintext is key;
// errdefs.ErrNotFound if there is none.
func (m *Manager) VerifyKey(ctx context.Context, key string) (keyID string, err error) {
	k, err := m.store.VerifyKey(ctx, key)
	if err != nil {
		return "", err
	}
	return k.ID, nil
}

// List is a page of the sandboxes f selects, and the token of the next
// page ("" after the last).
func (m *Manager) List(ctx context.Context, f ListFilter) (page []*Sandbox, next string, err error) {
	if m.reg != nil {
		return m.reg.List(ctx, f)
	}
	recs, next, err := m.store.ListSandboxes(ctx, storeFilter(f))
	if err != nil {
		return nil, "", err
	}
	page = make([]*Sandbox, len(recs))
	for i := range recs {
		page[i] = fromRecord(&recs[i])
	}
	return page, next, nil
}

// FindByEnvdToken returns the running sandbox, of any key, whose envd
// access token match accepts: how a signed /files URL, which names no key,
// finds its sandbox. Sandboxes without a token are not offered. It reads
// no record: anyone may send a signed URL, so the cost of one must not
// grow with what tenants store (only the tokens of the sandboxes this
// manager routes to are tried).
func (m *Manager) FindByEnvdToken(match func(token string) bool) (id string, ok bool) {
	type cand struct{ id, token string }
	m.mu.Lock()
	all := make([]cand, 0, len(m.live))
	for id, l := range m.live {
		if t := l.route.accessToken(); t != "" && l.routable() {
			all = append(all, cand{id, t})
		}
	}
	m.mu.Unlock()
	for _, c := range all {
		if match(c.token) {
			return c.id, true
		}
	}
	return "", false
}

// Kill kills a sandbox and forgets it; errdefs.ErrNotFound if the key has
// no such sandbox.
func (m *Manager) Kill(ctx context.Context, keyID, id string) (err error) {
	defer func() { m.metrics.Kill(metrics.KillRequest, err) }()
	if _, err := m.store.GetSandbox(ctx, keyID, id); err != nil {
		return err
	}
	return m.remove(ctx, id)
}

func (m *Manager) remove(ctx context.Context, id string) error {
	unlock, err := m.lockOp(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	return m.removeLocked(ctx, id)
}

// removeLocked is remove with the sandbox's operation lock held.
func (m *Manager) removeLocked(ctx context.Context, id string) error {
	// The record goes first: from here on the API reports the sandbox
	// gone, and its envd route closes at once below, instead of "running"
	// for the milliseconds the kill takes. A record that cannot be deleted
	// (the database locked by another process) fails the removal with
	// nothing changed: the sandbox runs on, routed and timed, never
	// listed running yet unreachable. A kill that fails after this leaves
	// a labelled runtime sandbox with no record, which Recover sweeps.
	if err := m.store.DeleteSandbox(ctx, id); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	m.mu.Lock()
	if t := m.timers[id]; t != nil {
		t.Stop()
		delete(m.timers, id)
	}
	l := m.live[id]
	delete(m.live, id)
	if l != nil {
		m.releaseLiveLocked(l)
	}
	m.mu.Unlock()
	if l != nil {
		l.route.close()
	}
	m.step(fault.KillUnrecorded)
	if m.removed != nil {
		m.removed(id)
	}
	if m.reg != nil {
		if err := m.reg.Delete(ctx, id); err != nil {
			// The cluster reconciles it: a record this node does not
			// have is deleted at the next pass.
			m.logger.Warn("registry: forget a removed sandbox", "id", id, "err", err)
		}
	}
	build, err := m.dropRuntime(ctx, id)
	if err != nil {
		return err
	}
	m.step(fault.KillStopped)
	os.RemoveAll(m.checkpointDir(pausedName(id))) // paused with its memory, if it was
	if t, err := m.templates.Get(build); build != "" && err == nil && t.Snapshot != nil && len(t.Tags) == 0 {
		// Made from a fork's capture or a deleted snapshot, which waited
		// for its last sandbox: collected now, not at the store's next
		// change.
		go m.templates.Collect()
	}
	// The files it was paused with, if it ever was; unmounted now, so
	// collected at once. (Looked up first: most sandboxes never were, and a
	// removal takes the store's lock.)
	if _, err := m.templates.Get(pausedName(id)); err == nil {
		if err := m.templates.Remove(pausedName(id), nil); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			m.logger.Warn("remove a paused sandbox's files", "id", id, "err", err)
		}
	}
	return nil
}

// SetTimeout makes a sandbox expire d from now (shorter or longer).
func (m *Manager) SetTimeout(ctx context.Context, keyID, id string, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("timeout %v: %w", d, errdefs.ErrInvalidArgument)
	}
	if _, err := m.store.GetSandbox(ctx, keyID, id); err != nil {
		return err
	}
	end := time.Now().Add(d)
	if err := m.store.SetEndAt(ctx, id, end); err != nil {
		return err
	}
	m.schedule(id, end)
	return nil
}

// Connect extends a running sandbox's life to at least d from now (never
// shortens it) and returns it.
//
// A paused sandbox is resumed (see pause.go): resumed reports it, and
// its life is then d from now.
func (m *Manager) Connect(ctx context.Context, keyID, id string, d time.Duration) (sb *Sandbox, resumed bool, err error) {
	return m.connect(ctx, keyID, id, d, false)
}

// ConnectReboot is Connect that resumes a paused sandbox by booting it
// again on its files (E2B's onResume "reboot"), whichever way it was
// paused: a sandbox that kept its memory loses it.
func (m *Manager) ConnectReboot(ctx context.Context, keyID, id string, d time.Duration) (sb *Sandbox, resumed bool, err error) {
	return m.connect(ctx, keyID, id, d, true)
}

func (m *Manager) connect(ctx context.Context, keyID, id string, d time.Duration, reboot bool) (sb *Sandbox, resumed bool, err error) {
	rec, err := m.store.GetSandbox(ctx, keyID, id)
	if err != nil {
		return nil, false, err
	}
	if rec.State == string(StatePaused) {
		unlock, err := m.lockOp(ctx, id)
		if err != nil {
			return nil, false, err
		}
		// Read again under the lock: another connect may have resumed
		// it, a kill removed it.
		rec, err = m.store.GetSandbox(ctx, keyID, id)
		if err == nil && rec.State == string(StatePaused) {
			err = m.resumeLocked(ctx, &rec, d, reboot)
			resumed = err == nil
		}
		unlock()
		if err != nil {
			return nil, false, err
		}
		if resumed {
			sb, err := m.Get(ctx, keyID, id)
			return sb, true, err
		}
	}
	if err := m.extend(ctx, id, d); err != nil {
		return nil, false, err
	}
	sb, err = m.Get(ctx, keyID, id)
	return sb, false, err
}

// schedule (re)arms the sandbox's expiry.
func (m *Manager) schedule(id string, end time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t := m.timers[id]; t != nil {
		t.Stop()
		delete(m.timers, id)
	}
	if l := m.live[id]; l != nil && (l.paused || l.pausing) {
		// A paused sandbox has no expiry: a refresh or a timeout that
		// raced its pause must not arm one (resume arms its own).
		return
	}
	m.timers[id] = time.AfterFunc(time.Until(end), func() { m.expire(id) })
}

// pauseRetry is how long after a failed pause at the timeout the next is
// tried.
const pauseRetry = time.Minute

// expire kills a sandbox whose time is up, unless it was extended since,
// or pauses it when its creator asked for that.
func (m *Manager) expire(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	unlock, err := m.lockOp(ctx, id)
	if err != nil {
		return
	}
	defer unlock()
	rec, err := m.store.GetSandbox(ctx, "", id)
	if err != nil || rec.State == string(StatePaused) {
		return // gone, or paused: a paused sandbox has no expiry
	}
	if d := time.Until(rec.EndAt); d > 0 {
		m.schedule(id, rec.EndAt)
		return
	}
	if rec.AutoPause {
		// Paused rather than killed, as its creator asked (E2B's
		// lifecycle onTimeout "pause").
		keep := !rec.AutoPauseFilesystem
		err := m.pauseLocked(ctx, "", id, keep)
		var limit *LimitError
		switch {
		case err == nil || errors.Is(err, ErrAlreadyPaused):
		case keep && errors.As(err, &limit):
			// No room to keep its memory: its files are kept instead,
			// rather than it running on past its time.
			m.logger.Info("pausing without memory at the timeout", "id", id, "reason", err)
			keep = false
			err = m.pauseLocked(ctx, "", id, false)
		case !keep:
			// Its files could not be kept (the store's disk is full, or
			// the sandbox made them fail to capture): frozen with its
			// memory instead, which keeps everything.
			m.logger.Warn("pausing with memory at the timeout: its files could not be kept", "id", id, "reason", err)
			keep = true
			err = m.pauseLocked(ctx, "", id, true)
		}
		if err != nil && !errors.Is(err, ErrAlreadyPaused) {
			// Neither way: again in a while, not at once (a failed pause
			// left the sandbox running with its end already past).
			retry := time.Now().Add(pauseRetry)
			m.logger.Warn("pause sandbox at its timeout; trying again later", "id", id, "err", err, "at", retry)
			if err := m.store.SetEndAt(ctx, id, retry); err == nil {
				m.schedule(id, retry)
			}
			return
		}
		m.logger.Info("sandbox paused at its timeout", "id", id, "keepMemory", keep)
		return
	}
	err = m.removeLocked(ctx, id)
	m.metrics.Kill(metrics.KillTimeout, err)
	if err != nil {
		// It runs on (removeLocked changed nothing): again in a while,
		// or it would outlive its timeout for good.
		retry := time.Now().Add(pauseRetry)
		m.logger.Warn("expire sandbox; trying again later", "id", id, "err", err, "at", retry)
		m.schedule(id, retry)
		return
	}
	m.logger.Info("sandbox expired", "id", id)
}

// controlPlaneLabel marks the runtime sandboxes a manager made, so that
// Recover can tell its orphans from sandboxes `hutch run` made.
const controlPlaneLabel = "hutch.control-plane"

// Recover adopts the sandboxes recorded in the store after a restart: the
// running ones become routable and get their expiry back; the ones whose
// init died meanwhile are cleaned up and forgotten (reported gone, never
// half-alive). It also removes what a server killed mid-create left
// behind: runtime sandboxes of the control plane that never made it into
// the store, and envd sockets of no sandbox.
func (m *Manager) Recover(ctx context.Context) error {
	all, err := m.store.AllSandboxes(ctx)
	if err != nil {
		return err
	}
	known := map[string]bool{}
	var nets []network.Live
	type adoption struct {
		sbx  runtime.Sandbox
		info runtimeInfo
		sb   *Sandbox
	}
	var alive []adoption
	for _, rec := range all {
		known[rec.ID] = true
		running := false
		sbx, err := m.rt.Load(ctx, rec.ID)
		paused := rec.State == string(StatePaused)
		var info runtimeInfo
		if paused && json.Unmarshal([]byte(rec.Runtime), &info) == nil && (info.PausedBuild != "" || info.Checkpoint != "") {
			// Paused as its files, which are in the template store. A
			// runtime sandbox of its id is what a server killed after
			// recording the pause, or mid-resume, left: the record wins.
			if err == nil {
				m.logger.Info("removing the processes of a sandbox recorded paused without memory", "id", rec.ID)
				if err := sbx.Delete(ctx); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
					return fmt.Errorf("sandbox %s: %w", rec.ID, err)
				}
			}
			api, control := m.socketPaths(rec.ID)
			os.Remove(api)
			os.Remove(control)
			continue
		}
		if err == nil {
			if st, err := sbx.Status(ctx); err == nil && (st.State == runtime.StateRunning || st.State == runtime.StateFrozen) {
				running = agree(ctx, sbx, st.State, paused) == nil
			}
		}
		if json.Unmarshal([]byte(rec.Runtime), &info) != nil || info.Socket == "" {
			running = false
		}
		if !running {
			m.logger.Info("sandbox gone while the server was down", "id", rec.ID)
			if err := m.remove(ctx, rec.ID); err != nil {
				return err
			}
			continue
		}
		if info.Control == "" {
			info.Control = info.Socket // made before the control socket
		}
		sb := fromRecord(&rec)
		alive = append(alive, adoption{sbx, info, sb})
		if p, err := parseEgress(sb.Network); err == nil && p.Internet {
			nets = append(nets, network.Live{ID: rec.ID, Policy: p})
		}
	}
	if m.net != nil {
		// The firewall for the sandboxes to adopt, replacing the previous
		// server's in one step; links of sandboxes gone are removed. Before
		// any is adopted: one that ends at once (killed while no server
		// ran, its teardown not finished) is removed by its watch, whose
		// Detach must find its network.
		if err := m.net.Start(ctx, nets); err != nil {
			return fmt.Errorf("sandbox networks: %w", err)
		}
	}
	for _, a := range alive {
		m.mu.Lock()
		if a.sb.State == StatePaused {
			m.frozen.add(a.sb.KeyID)
		} else {
			m.run.add(a.sb.KeyID)
		}
		m.mu.Unlock()
		m.adopt(a.sbx, newRoute(a.info.Socket, a.info.Control), a.sb, false)
	}
	statuses, err := m.rt.List(ctx)
	if err != nil {
		return err
	}
	for _, st := range statuses {
		if known[st.ID] || st.Labels[controlPlaneLabel] != "true" {
			continue
		}
		m.logger.Info("removing a sandbox whose create was cut short", "id", st.ID)
		if err := m.remove(ctx, st.ID); err != nil {
			return err
		}
	}
	socks, err := os.ReadDir(m.sockets)
	if err != nil {
		return err
	}
	for _, e := range socks {
		id, ok := strings.CutSuffix(e.Name(), controlSuffix)
		if !ok {
			id, ok = strings.CutSuffix(e.Name(), apiSuffix)
		}
		if !ok || !known[id] {
			os.Remove(filepath.Join(m.sockets, e.Name()))
		}
	}
	// Only now: warm sandboxes are not recorded, so the orphan sweep above
	// must not see the pool's.
	m.startPools()
	return nil
}

// Close stops the expiry timers and sampling and removes the warm pools.
// Sandboxes keep running: a restarted server adopts them with Recover.
func (m *Manager) Close() {
	m.mu.Lock()
	for id, t := range m.timers {
		t.Stop()
		delete(m.timers, id)
	}
	m.mu.Unlock()
	m.cancel()
	m.stopPools()
}

// minDataFree is the least room a sandbox is started with on the data
// dir's file system: its writable layer and disk image are there, sparse,
// and so is the store, which must keep room for the kills and pauses
// that free space.
const minDataFree = 256 << 20

// dataRoom reports, as an error wrapping errdefs.ErrResourceExhausted,
// whether the data dir's file system is down to its last minDataFree
// bytes or 1 % of its inodes: sandboxes are not started there, rather
// than started on a disk whose writes would fail.
func (m *Manager) dataRoom() error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(m.sockets, &st); err != nil {
		return nil // unknown: the writes themselves will say
	}
	if free := int64(st.Bavail) * int64(st.Bsize); free < minDataFree {
		return fmt.Errorf("no sandbox started with %d MiB left on the disk of the server's data dir: %w", free>>20, errdefs.ErrResourceExhausted)
	}
	if st.Files > 0 && st.Ffree < st.Files/100 {
		return fmt.Errorf("no sandbox started with %d inodes left on the disk of the server's data dir: %w", st.Ffree, errdefs.ErrResourceExhausted)
	}
	return nil
}

// newID returns an id in E2B's shape: "i" and 20 of [a-z0-9].
func newID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 20)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return "i" + string(b)
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// PatchMetadata changes sandbox id's metadata as a JSON merge patch does:
// each key of patch with a value sets it, each with nil removes it. The
// sandbox is returned as it is afterwards. Keys and values are not
// checked here: the protocol adapter applies its own rules.
func (m *Manager) PatchMetadata(ctx context.Context, keyID, id string, patch map[string]*string) (*Sandbox, error) {
	unlock, err := m.lockOp(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	rec, err := m.store.GetSandbox(ctx, keyID, id)
	if err != nil {
		return nil, err
	}
	meta := maps.Clone(rec.Metadata)
	for k, v := range patch {
		if v == nil {
			delete(meta, k)
		} else {
			meta[k] = *v
		}
	}
	if err := m.store.SetMetadata(ctx, id, meta); err != nil {
		return nil, err
	}
	rec.Metadata = meta
	m.republish(ctx, id)
	return fromRecord(&rec), nil
}
