// Package builder runs template builds: a base (an OCI image or a
// template) and a list of steps (RUN, COPY, ENV, WORKDIR, USER, as E2B's
// Template SDK sends them and a Dockerfile is turned into) become a new
// template in the store.
//
// Every RUN step runs in a real sandbox of the template as built so far
// (a build is untrusted code too), with the step's user, env and workdir
// and the network a default sandbox has; what it changed, captured from
// the sandbox's writable layer, is the step's layer. A COPY step's layer is
// made on the host from the uploaded archive, in an overlay of the layers
// below. Each layer is cached by the hash of (the steps before it, the
// step, its files), so a rebuild with nothing changed makes no sandbox and
// a changed step rebuilds from there on.
//
//	request (name, tags) ─► waiting ─► start (base, steps) ─► building ─► ready | error
//	                                   base: import image / take template layers
//	                                   for each step: cached? ─► reuse layer
//	                                                  RUN ─► sandbox ─► exec ─► freeze ─► capture ─► layer
//	                                                  COPY ─► overlay on host ─► extract ─► layer
//	                                   finalize: start and ready commands pass in a sandbox
//	                                   commit: build id, tags
package builder

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hutch-sandbox/hutch/internal/cabundle"
	"github.com/hutch-sandbox/hutch/internal/envdapi"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/fault"
	"github.com/hutch-sandbox/hutch/internal/metrics"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/template"
)

// cacheVersion is part of every step's cache key: changing what a step
// makes of the same inputs (how COPY treats an existing directory, say)
// changes it, so that no layer of the old meaning is reused.
const cacheVersion = "1"

// Status is where a build is.
type Status string

// A build's statuses, as E2B names them.
const (
	StatusWaiting  Status = "waiting"  // requested; its steps not given yet
	StatusBuilding Status = "building" // running
	StatusReady    Status = "ready"    // done: the template exists
	StatusError    Status = "error"    // failed: Reason says where
)

// Step names that are not a step's number, as E2B's SDK maps them to the
// user's call sites.
const (
	StepBase     = "base"
	StepFinalize = "finalize"
)

// LogEntry is one line of a build's log.
type LogEntry struct {
	Time    time.Time
	Level   string // debug, info, warn, error
	Message string
	// Step is the step the line belongs to: "base", "1".."N", "finalize".
	Step string
}

// Failure is why a build failed.
type Failure struct {
	Message string
	Step    string // as LogEntry.Step; empty when not one step's fault
}

// Request is a build asked for, before its steps are given.
type Request struct {
	Name string   // the template's name
	Tags []string // the tags the build gets ("default" when none)
	// CPUCount and MemoryMB are recorded in the template.
	CPUCount, MemoryMB int
}

// Spec is what a build is made of.
type Spec struct {
	// Exactly one of FromImage (an image reference; E2B's "e2bdev/base"
	// means the base template) and FromTemplate.
	FromImage    string
	FromTemplate string
	// Username and Password authenticate to FromImage's registry.
	Username, Password string
	Steps              []template.Step
	StartCmd, ReadyCmd string
	// Force ignores the layer cache for every step.
	Force bool
	// KeepCABundle keeps the server's extra CA certificates (--ca-bundle)
	// in the layers; by default they are taken out again.
	KeepCABundle bool
}

// Build is one build's state.
type Build struct {
	ID       string
	Template string
	Tags     []string
	KeyID    string
	Status   Status
	Reason   *Failure
	Created  time.Time
	Finished time.Time
	// Result is the template made, once ready.
	Result *template.Template

	req  Request
	logs []LogEntry
	// logBytes is what logs' messages hold; cut counts the lines past
	// the bounds (maxLogEntries, maxLogBytes) that were not kept.
	logBytes, cut int
}

// A build's log lives in the server's memory for finishedTTL, and a RUN
// step prints what it likes (a million lines grew the server by 170 MB,
// review 27 F8): a build keeps its first maxLogEntries lines, at most
// maxLogBytes of them, and says how many more it did not keep.
const (
	maxLogEntries = 20000
	maxLogBytes   = 2 << 20
)

// Options configure a Builder.
type Options struct {
	Store   *template.Store
	Manager *sandbox.Manager
	// CABundle is the server's --ca-bundle, taken out of build layers.
	CABundle *cabundle.Bundle
	// RegistryAllow are the registries ("host[:port]") on loopback or
	// private addresses that builds may pull from; builds pull from
	// public addresses only otherwise (template.ImportOptions.PublicOnly).
	RegistryAllow []string
	// StepTimeout bounds each RUN step; 0 means DefaultStepTimeout.
	StepTimeout time.Duration
	// Metrics counts builds and times them; nil counts nothing.
	Metrics *metrics.Metrics
	// Faults are the fault points armed (a test hook, package fault).
	Faults fault.Points
	Logger *slog.Logger
}

// DefaultStepTimeout bounds a RUN step unless Options say otherwise.
const DefaultStepTimeout = time.Hour

// Builder runs builds. It is safe for concurrent use.
type Builder struct {
	store    *template.Store
	mgr      *sandbox.Manager
	caBundle *cabundle.Bundle
	allow    []string
	stepMax  time.Duration
	metrics  *metrics.Metrics
	faults   fault.Points
	logger   *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	cond    *sync.Cond // broadcast on every log line and status change
	builds  map[string]*Build
	running map[string]string // template name -> the build running for it
}

// New returns a Builder.
func New(opts Options) *Builder {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	b := &Builder{store: opts.Store, mgr: opts.Manager, caBundle: opts.CABundle, allow: opts.RegistryAllow, stepMax: opts.StepTimeout, metrics: opts.Metrics, faults: opts.Faults, logger: logger,
		builds: map[string]*Build{}, running: map[string]string{}}
	if b.stepMax <= 0 {
		b.stepMax = DefaultStepTimeout
	}
	b.cond = sync.NewCond(&b.mu)
	b.ctx, b.cancel = context.WithCancel(context.Background())
	return b
}

// Close stops running builds and waits for them to end.
func (b *Builder) Close() {
	b.cancel()
	b.wg.Wait()
}

// Request registers a build of r.Name for keyID, waiting for its steps.
// It fails with errdefs.ErrAlreadyExists while another build of the
// same name is running.
func (b *Builder) Request(keyID string, r Request) (*Build, error) {
	if !template.ValidName(r.Name) {
		_, _, err := template.ParseRef(r.Name)
		return nil, err
	}
	if len(r.Tags) > maxTags {
		return nil, fmt.Errorf("a build takes at most %d tags; this one has %d: %w", maxTags, len(r.Tags), errdefs.ErrInvalidArgument)
	}
	for _, t := range r.Tags {
		if !template.ValidName(t) {
			return nil, fmt.Errorf("template tag %q: %w", t, errdefs.ErrInvalidArgument)
		}
	}
	if template.Reserved(r.Name) {
		return nil, fmt.Errorf("template name %q: names starting with %q are Hutch's own (the files of paused sandboxes): %w", r.Name, template.PausedPrefix, errdefs.ErrInvalidArgument)
	}
	if template.Builtin(r.Name) {
		return nil, fmt.Errorf("%s is one of Hutch's own templates (built on the server's host by `hutch template build %s`); build yours under another name: %w", r.Name, r.Name, errdefs.ErrInvalidArgument)
	}
	if r.CPUCount < 0 || r.MemoryMB < 0 {
		return nil, fmt.Errorf("cpuCount and memoryMB must not be negative: %w", errdefs.ErrInvalidArgument)
	}
	if err := b.store.MayChange(r.Name, keyID); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pruneLocked()
	if id, ok := b.running[r.Name]; ok {
		return nil, fmt.Errorf("template %s is being built (build %s); wait for it to finish: %w", r.Name, id, errdefs.ErrAlreadyExists)
	}
	waiting := 0
	for _, o := range b.builds {
		if o.KeyID == keyID && o.Status == StatusWaiting {
			waiting++
		}
	}
	if waiting >= maxWaitingPerKey {
		return nil, fmt.Errorf("%d builds of this key were requested and not started, the most one key may have; start or let them expire: %w", waiting, errdefs.ErrResourceExhausted)
	}
	bd := &Build{ID: template.NewBuildID(), Template: r.Name, Tags: r.Tags, KeyID: keyID, Status: StatusWaiting, Created: time.Now().UTC(), req: r}
	b.builds[bd.ID] = bd
	return bd, nil
}

// Get returns a copy of build id's state, its log from offset on (at
// most limit entries, 0 for all) and the log's length. A build of another
// key, or none, is errdefs.ErrNotFound. A build that is not in memory
// (the server restarted) but whose template build is in the store is
// reported ready.
func (b *Builder) Get(keyID, id string, offset, limit int) (Build, []LogEntry, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	bd := b.builds[id]
	if bd == nil {
		if t, err := b.store.Get(id); err == nil && (keyID == "" || t.Owner == keyID) {
			return Build{ID: id, Template: t.Name, KeyID: t.Owner, Status: StatusReady, Result: t, Created: t.Built, Finished: t.Built}, nil, nil
		}
		return Build{}, nil, fmt.Errorf("build %s: %w", id, errdefs.ErrNotFound)
	}
	if bd.KeyID != keyID && keyID != "" {
		return Build{}, nil, fmt.Errorf("build %s: %w", id, errdefs.ErrNotFound)
	}
	offset = max(offset, 0)
	var logs []LogEntry
	if offset < len(bd.logs) {
		logs = bd.logs[offset:]
		if limit > 0 && len(logs) > limit {
			logs = logs[:limit]
		}
		logs = append([]LogEntry(nil), logs...)
	}
	return *bd, logs, nil
}

// Wait blocks until build id has more than offset log entries or has
// ended, or ctx ends.
func (b *Builder) Wait(ctx context.Context, id string, offset int) {
	stop := context.AfterFunc(ctx, func() {
		b.mu.Lock()
		b.cond.Broadcast()
		b.mu.Unlock()
	})
	defer stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		bd := b.builds[id]
		if bd == nil || len(bd.logs) > offset || bd.Status == StatusReady || bd.Status == StatusError || ctx.Err() != nil {
			return
		}
		b.cond.Wait()
	}
}

// Start gives build id its spec and runs it in the background. The spec
// is checked first: a bad one is an error wrapping
// errdefs.ErrInvalidArgument and the build stays waiting. A build that is
// not waiting fails with errdefs.ErrFailedPrecondition.
func (b *Builder) Start(keyID, id string, spec Spec) error {
	if err := checkSpec(&spec); err != nil {
		return err
	}
	b.mu.Lock()
	bd := b.builds[id]
	if bd == nil || (bd.KeyID != keyID && keyID != "") {
		b.mu.Unlock()
		return fmt.Errorf("build %s: %w", id, errdefs.ErrNotFound)
	}
	if bd.Status != StatusWaiting {
		b.mu.Unlock()
		return fmt.Errorf("build %s is %s, not waiting: %w", id, bd.Status, errdefs.ErrFailedPrecondition)
	}
	if other, ok := b.running[bd.Template]; ok && other != id {
		b.mu.Unlock()
		return fmt.Errorf("template %s is being built (build %s): %w", bd.Template, other, errdefs.ErrAlreadyExists)
	}
	if err := b.keyCapLocked(bd.KeyID); err != nil {
		b.mu.Unlock()
		return err
	}
	bd.Status = StatusBuilding
	b.running[bd.Template] = id
	b.mu.Unlock()
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		b.run(b.ctx, bd, spec)
	}()
	return nil
}

// Run builds synchronously (the CLI's `hutch template build -f`): Request
// and Start in one, calling log with every line, and returns the template.
func (b *Builder) Run(ctx context.Context, keyID string, r Request, spec Spec, log func(LogEntry)) (*template.Template, error) {
	bd, err := b.Request(keyID, r)
	if err != nil {
		return nil, err
	}
	if err := checkSpec(&spec); err != nil {
		b.mu.Lock()
		delete(b.builds, bd.ID)
		b.mu.Unlock()
		return nil, err
	}
	b.mu.Lock()
	if other, ok := b.running[bd.Template]; ok {
		b.mu.Unlock()
		return nil, fmt.Errorf("template %s is being built (build %s): %w", bd.Template, other, errdefs.ErrAlreadyExists)
	}
	if err := b.keyCapLocked(bd.KeyID); err != nil {
		delete(b.builds, bd.ID)
		b.mu.Unlock()
		return nil, err
	}
	bd.Status = StatusBuilding
	b.running[bd.Template] = bd.ID
	b.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.run(ctx, bd, spec)
	}()
	for offset := 0; ; {
		b.Wait(ctx, bd.ID, offset)
		st, logs, _ := b.Get(keyID, bd.ID, offset, 0)
		for _, l := range logs {
			if log != nil {
				log(l)
			}
		}
		offset += len(logs)
		if st.Status == StatusReady {
			<-done
			return st.Result, nil
		}
		if st.Status == StatusError {
			<-done
			return nil, &Error{Build: st.ID, Failure: *st.Reason}
		}
	}
}

// Error is a failed build, as Run returns it.
type Error struct {
	Build string
	Failure
}

func (e *Error) Error() string {
	if e.Step != "" {
		return fmt.Sprintf("build %s failed at step %s: %s", e.Build, e.Step, e.Message)
	}
	return fmt.Sprintf("build %s failed: %s", e.Build, e.Message)
}

// A build's steps each cost the server a layer, a cache entry and time;
// builds run at once cost a sandbox each and CPU: one key's requests of
// 20,000 ENV steps, twenty at once, took the server past a gigabyte
// (review 27 F9). maxSteps bounds a build (Dockerfiles rarely pass a
// hundred instructions), maxBuildsPerKey the builds one key runs at once.
const (
	maxSteps        = 512
	maxBuildsPerKey = 4
	// maxWaitingPerKey bounds the builds a key requested and has not
	// started, which the server keeps for an hour; maxTags the names one
	// build gives its template (300 requests of 100,000 tags each took
	// the server to 1.4 GB, review 27 round 2, G1 and G5).
	maxWaitingPerKey = 32
	maxTags          = 64
	// maxFailure bounds a failure's message, which quotes the step (a
	// RUN of 15 MB made a 30 MB status, G2).
	maxFailure = 8 << 10
	// maxFinishedPerKey is how many finished builds of a key, logs and
	// all, the server keeps (finishedTTL at most).
	maxFinishedPerKey = 32
)

// keyCapLocked refuses another running build of keyID past
// maxBuildsPerKey (errdefs.ErrResourceExhausted). b.mu must be held.
func (b *Builder) keyCapLocked(keyID string) error {
	n := 0
	for _, id := range b.running {
		if bd := b.builds[id]; bd != nil && bd.KeyID == keyID {
			n++
		}
	}
	if n >= maxBuildsPerKey {
		return fmt.Errorf("%d builds of this key are running, the most one key may run at once; wait for one to finish: %w", n, errdefs.ErrResourceExhausted)
	}
	return nil
}

// checkSpec refuses a spec that cannot build, before anything runs.
func checkSpec(s *Spec) error {
	if s.FromImage == "e2bdev/base" || strings.HasPrefix(s.FromImage, "e2bdev/base:") {
		// E2B's Template().fromBaseImage(): Hutch's base template.
		s.FromImage, s.FromTemplate = "", "base"
	}
	if (s.FromImage == "") == (s.FromTemplate == "") {
		return fmt.Errorf("give exactly one of fromImage and fromTemplate: %w", errdefs.ErrInvalidArgument)
	}
	if len(s.Steps) > maxSteps {
		return fmt.Errorf("a build has at most %d steps; this one has %d: %w", maxSteps, len(s.Steps), errdefs.ErrInvalidArgument)
	}
	for i, st := range s.Steps {
		n := i + 1
		bad := func(msg string) error {
			return &Error{Failure: Failure{Step: strconv.Itoa(n), Message: fmt.Sprintf("step %d (%s): %s", n, st.Type, msg)}}
		}
		switch st.Type {
		case template.StepRun:
			if len(st.Args) < 1 || len(st.Args) > 2 || strings.TrimSpace(st.Args[0]) == "" {
				return fmt.Errorf("%w: %w", bad("RUN takes [command, user?]"), errdefs.ErrInvalidArgument)
			}
		case template.StepCopy:
			if len(st.Args) < 2 || len(st.Args) > 4 || st.Args[0] == "" || st.Args[1] == "" {
				return fmt.Errorf("%w: %w", bad("COPY takes [src, dest, user?, mode?]"), errdefs.ErrInvalidArgument)
			}
			if !template.ValidHash(st.FilesHash) {
				return fmt.Errorf("%w: %w", bad("COPY needs the filesHash of its uploaded files"), errdefs.ErrInvalidArgument)
			}
			if len(st.Args) == 4 && st.Args[3] != "" {
				if _, err := strconv.ParseUint(st.Args[3], 8, 32); err != nil {
					return fmt.Errorf("%w: %w", bad(fmt.Sprintf("mode %q is not octal", st.Args[3])), errdefs.ErrInvalidArgument)
				}
			}
		case template.StepEnv:
			if len(st.Args) == 0 || len(st.Args)%2 != 0 {
				return fmt.Errorf("%w: %w", bad("ENV takes [key, value, ...]"), errdefs.ErrInvalidArgument)
			}
			for j := 0; j < len(st.Args); j += 2 {
				if st.Args[j] == "" || strings.ContainsAny(st.Args[j], "=\x00") {
					return fmt.Errorf("%w: %w", bad(fmt.Sprintf("bad variable name %q", st.Args[j])), errdefs.ErrInvalidArgument)
				}
			}
		case template.StepWorkdir, template.StepUser:
			if len(st.Args) != 1 || st.Args[0] == "" {
				return fmt.Errorf("%w: %w", bad(st.Type+" takes one argument"), errdefs.ErrInvalidArgument)
			}
		default:
			return fmt.Errorf("%w: %w", bad("unknown step type (supported: RUN, COPY, ENV, WORKDIR, USER)"), errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// logf adds a line to bd's log.
func (b *Builder) logf(bd *Build, level, step, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	b.mu.Lock()
	defer b.mu.Unlock()
	// The last place is kept for the note of what was cut (finish), and
	// errors are always kept: they say why the build failed.
	if level != "error" && (len(bd.logs) >= maxLogEntries-1 || bd.logBytes+len(msg) > maxLogBytes) {
		bd.cut++
		return
	}
	bd.logBytes += len(msg)
	bd.logs = append(bd.logs, LogEntry{Time: time.Now().UTC(), Level: level, Message: msg, Step: step})
	b.cond.Broadcast()
}

// finish ends bd with the template made or the failure.
func (b *Builder) finish(bd *Build, t *template.Template, fail *Failure) {
	b.mu.Lock()
	defer b.mu.Unlock()
	bd.Finished = time.Now().UTC()
	if bd.cut > 0 {
		bd.logs = append(bd.logs, LogEntry{Time: bd.Finished, Level: "warn",
			Message: fmt.Sprintf("… %d more log lines were not kept (a build keeps %d lines, %d MiB)", bd.cut, maxLogEntries, maxLogBytes>>20)})
	}
	if fail != nil {
		if len(fail.Message) > maxFailure {
			f := *fail
			f.Message = f.Message[:maxFailure/2] + fmt.Sprintf(" …[%d bytes cut]… ", len(f.Message)-maxFailure) + f.Message[len(f.Message)-maxFailure/2:]
			fail = &f
		}
		bd.Status, bd.Reason = StatusError, fail
		bd.logs = append(bd.logs, LogEntry{Time: bd.Finished, Level: "error", Message: "build failed: " + fail.Message, Step: fail.Step})
	} else {
		bd.Status, bd.Result = StatusReady, t
	}
	delete(b.running, bd.Template)
	b.pruneLocked()
	b.cond.Broadcast()
}

// state is a build's progress through its steps.
type state struct {
	bd     *Build
	spec   Spec
	lease  *template.Lease
	layers []string
	cfg    template.Config
	chain  string // the cache key of everything so far
	forced bool
}

// stepError is a step's failure.
type stepError struct {
	step string
	err  error
}

func (e *stepError) Error() string { return e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

func (b *Builder) run(ctx context.Context, bd *Build, spec Spec) {
	start := time.Now()
	done := b.metrics.BuildStarted()
	t, err := b.build(ctx, bd, spec)
	done(err)
	if err != nil {
		step := ""
		var se *stepError
		if errors.As(err, &se) {
			step = se.step
		}
		b.logger.Info("template build failed", "build", bd.ID, "template", bd.Template, "step", step, "err", err)
		b.finish(bd, nil, &Failure{Message: err.Error(), Step: step})
		return
	}
	b.logf(bd, "info", StepFinalize, "template %s built in %s (build %s)", t.Ref(), time.Since(start).Round(time.Millisecond), t.ID)
	b.finish(bd, t, nil)
}

func (b *Builder) build(ctx context.Context, bd *Build, spec Spec) (*template.Template, error) {
	lease, err := b.store.NewLease()
	if err != nil {
		return nil, err
	}
	defer lease.Release()
	st := &state{bd: bd, spec: spec, lease: lease, forced: spec.Force}
	if err := b.base(ctx, st); err != nil {
		return nil, &stepError{StepBase, err}
	}
	for i, step := range spec.Steps {
		name := strconv.Itoa(i + 1)
		if err := ctx.Err(); err != nil {
			return nil, &stepError{name, err}
		}
		if err := b.step(ctx, st, name, step); err != nil {
			return nil, &stepError{name, err}
		}
	}
	st.cfg.StartCmd, st.cfg.ReadyCmd = spec.StartCmd, spec.ReadyCmd
	st.cfg.CPUCount, st.cfg.MemoryMB = bd.req.CPUCount, bd.req.MemoryMB
	st.cfg.Source = "build"
	st.cfg.Owner = bd.KeyID
	st.cfg.Built = time.Time{}
	if spec.StartCmd != "" || spec.ReadyCmd != "" {
		// The same layers and config with the same commands passed
		// before: a rebuild with nothing changed makes no sandbox.
		h := sha256.New()
		fmt.Fprintf(h, "%s\x00finalize\x00%s\x00%s\x00", st.chain, spec.StartCmd, spec.ReadyCmd)
		key := hex.EncodeToString(h.Sum(nil))
		if b.cachedMark(st, key, false) != "" {
			b.logf(st.bd, "info", StepFinalize, "CACHED the start command %q and ready command %q passed in a build of the same steps", spec.StartCmd, spec.ReadyCmd)
		} else {
			if err := b.finalize(ctx, st); err != nil {
				return nil, &stepError{StepFinalize, err}
			}
			b.cachedMark(st, key, true)
		}
	}
	t, err := b.store.CommitAs(bd.ID, bd.Template, tagsOrDefault(bd.Tags), st.layers, st.cfg)
	if err != nil {
		return nil, &stepError{StepFinalize, err}
	}
	b.faults.At(fault.BuildCommitted)
	return t, nil
}

func tagsOrDefault(tags []string) []string {
	if len(tags) == 0 {
		return []string{template.DefaultTag}
	}
	return tags
}

// base starts st from the spec's image or template.
func (b *Builder) base(ctx context.Context, st *state) error {
	spec := st.spec
	if spec.FromTemplate != "" {
		t, err := b.store.Get(spec.FromTemplate)
		if err == nil {
			err = t.MayUse(st.bd.KeyID)
		}
		if err != nil {
			return fmt.Errorf("base template %s: %w", spec.FromTemplate, err)
		}
		b.logf(st.bd, "info", StepBase, "FROM template %s (build %s, %d layers)", t.Ref(), t.ID, len(t.Layers))
		st.layers = append([]string(nil), t.Layers...)
		st.cfg = template.Config{DefaultUser: t.DefaultUser, DefaultWorkdir: t.DefaultWorkdir, Env: t.Env, Cmd: t.Cmd, Entrypoint: t.Entrypoint, DiskSizeMB: t.DiskSizeMB, Runtime: t.Runtime}
	} else {
		b.logf(st.bd, "info", StepBase, "FROM image %s", spec.FromImage)
		img, desc, err := template.OpenImage(ctx, spec.FromImage, template.ImportOptions{Username: spec.Username, Password: spec.Password,
			RegistryOnly: true, PublicOnly: true, Allow: b.allow})
		if err != nil {
			return err
		}
		w := &logWriter{b: b, bd: st.bd, step: StepBase}
		layers, err := b.store.ImportLayers(ctx, img, desc, w)
		w.Flush()
		if err != nil {
			return err
		}
		cfg, err := template.ImageConfig(img)
		if err != nil {
			return err
		}
		st.layers, st.cfg = layers, cfg
	}
	st.lease.Add(st.layers...)
	h := sha256.New()
	// The key is part of every cache key: one key's layers are never
	// another's cache hits (a step's result is what that key's sandbox
	// made of it, and the key can reach that sandbox).
	fmt.Fprintf(h, "base\x00%s\x00%s\x00%s\x00", cacheVersion, st.bd.KeyID, strings.Join(st.layers, ","))
	json.NewEncoder(h).Encode(st.cfg)
	st.chain = hex.EncodeToString(h.Sum(nil))
	return nil
}

// step runs one step, or takes its layer from the cache.
func (b *Builder) step(ctx context.Context, st *state, name string, step template.Step) error {
	st.forced = st.forced || step.Force
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00", st.chain, step.Type)
	json.NewEncoder(h).Encode(step.Args)
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00", step.FilesHash, st.cfg.DefaultUser, st.cfg.DefaultWorkdir)
	json.NewEncoder(h).Encode(st.cfg.Env)
	key := hex.EncodeToString(h.Sum(nil))
	defer func() { st.chain = key }()
	desc := step.Type + " " + strings.Join(step.Args, " ")
	switch step.Type {
	case template.StepEnv:
		for i := 0; i < len(step.Args); i += 2 {
			st.cfg.Env = setEnv(st.cfg.Env, step.Args[i], expandEnv(step.Args[i+1], st.cfg.Env))
		}
		b.logf(st.bd, "info", name, "%s[%s] %s", b.cachedMark(st, key, true), name, desc)
		return nil
	case template.StepUser:
		st.cfg.DefaultUser = step.Args[0]
		b.logf(st.bd, "info", name, "%s[%s] %s", b.cachedMark(st, key, true), name, desc)
		return nil
	case template.StepWorkdir:
		st.cfg.DefaultWorkdir = resolvePath(st.cfg.DefaultWorkdir, step.Args[0])
		if template.StackFS(b.layerDirs(st.layers)).IsDir(strings.TrimPrefix(st.cfg.DefaultWorkdir, "/")) {
			// There already: nothing to make, no sandbox to start.
			b.logf(st.bd, "info", name, "[%s] %s (exists)", name, desc)
			return nil
		}
	}
	if !st.forced {
		if id, ok := b.store.CacheGet(key); ok {
			b.logf(st.bd, "info", name, "CACHED [%s] %s", name, desc)
			st.lease.Add(id)
			if !b.emptyLayer(id) {
				st.layers = append(st.layers, id)
			}
			return nil
		}
	}
	b.logf(st.bd, "info", name, "[%s] %s", name, desc)
	start := time.Now()
	var id string
	var err error
	switch step.Type {
	case template.StepRun:
		user := st.cfg.DefaultUser
		if len(step.Args) > 1 && step.Args[1] != "" {
			user = step.Args[1]
		}
		id, err = b.runStep(ctx, st, name, step.Args[0], user, st.cfg.DefaultWorkdir)
	case template.StepWorkdir:
		dir := st.cfg.DefaultWorkdir
		id, err = b.runStep(ctx, st, name, fmt.Sprintf("[ -d %[1]s ] || { mkdir -p %[1]s && chown %[2]s %[1]s; }", shellQuote(dir), shellQuote(st.cfg.DefaultUser)), "root", "/")
	case template.StepCopy:
		id, err = b.copyStep(ctx, st, name, step, key)
	}
	if err != nil {
		return err
	}
	if err := b.store.CachePut(key, id); err != nil {
		return err
	}
	b.faults.At(fault.BuildLayer)
	st.lease.Add(id)
	if !b.emptyLayer(id) {
		st.layers = append(st.layers, id)
	}
	b.logf(st.bd, "debug", name, "[%s] done in %s", name, time.Since(start).Round(time.Millisecond))
	return nil
}

// cachedMark is "CACHED " when a step that makes no layer (ENV, USER, the
// finalize check) was done before with key, and the cache is not skipped,
// else "". With record, a miss is recorded as done (its cache entry names
// the top layer so far, which keeps it only as long as that one).
func (b *Builder) cachedMark(st *state, key string, record bool) string {
	if !st.forced {
		if _, ok := b.store.CacheGet(key); ok {
			return "CACHED "
		}
	}
	if record && len(st.layers) > 0 {
		b.store.CachePut(key, st.layers[len(st.layers)-1])
	}
	return ""
}

// emptyLayer reports whether layer id holds no files: such a layer is
// cached but not stacked.
func (b *Builder) emptyLayer(id string) bool {
	ents, err := os.ReadDir(filepath.Join(b.store.Dir(), "layers", id, "rootfs"))
	return err == nil && len(ents) == 0
}

// scratch registers the build so far as an untagged build, which
// sandboxes can be created from, and returns its id and a func removing it.
func (b *Builder) scratch(st *state) (string, func(), error) {
	cfg := st.cfg
	cfg.StartCmd, cfg.ReadyCmd = "", ""
	t, err := b.store.CommitAs(template.NewBuildID(), st.bd.Template, nil, st.layers, cfg)
	if err != nil {
		return "", nil, err
	}
	return t.ID, func() { b.store.Remove(t.ID, nil) }, nil
}

// runStep runs cmd as user in cwd in a sandbox of the build so far and
// makes what it changed a layer.
func (b *Builder) runStep(ctx context.Context, st *state, name, cmd, user, cwd string) (string, error) {
	tid, drop, err := b.scratch(st)
	if err != nil {
		return "", err
	}
	defer drop()
	b.faults.At(fault.BuildScratch)
	sb, err := b.mgr.Create(ctx, sandbox.CreateRequest{KeyID: st.bd.KeyID, Internal: true, Template: tid, Timeout: 24 * time.Hour,
		Metadata: map[string]string{"hutch.build": st.bd.ID, "hutch.step": name}})
	if err != nil {
		return "", fmt.Errorf("build sandbox: %w", err)
	}
	defer b.mgr.Discard(context.Background(), sb.ID)
	out := &logWriter{b: b, bd: st.bd, step: name}
	rctx, cancel := context.WithTimeout(ctx, b.stepMax)
	defer cancel()
	code, err := b.mgr.Exec(rctx, sb.ID, sandbox.ExecRequest{Shell: cmd, User: user, Cwd: cwd,
		Output: func(_ bool, data []byte) { out.Write(data) }})
	out.Flush()
	if rctx.Err() != nil && ctx.Err() == nil {
		return "", fmt.Errorf("command %q did not finish within %s", cmd, b.stepMax)
	}
	if err != nil {
		return "", err
	}
	if code != 0 {
		return "", fmt.Errorf("command %q exited with code %d", cmd, code)
	}
	layer, err := b.mgr.CaptureToStore(ctx, sb.ID, b.layerDirs(st.layers), st.lease, "build "+st.bd.Template+" step "+name, st.spec.KeepCABundle)
	if err != nil {
		return "", fmt.Errorf("capture the step's layer: %w", err)
	}
	return layer.ID, nil
}

func (b *Builder) layerDirs(ids []string) []string {
	dirs := make([]string, len(ids))
	for i, id := range ids {
		dirs[i] = filepath.Join(b.store.Dir(), "layers", id, "rootfs")
	}
	return dirs
}

// finalize checks, in a sandbox of the finished template, that its start
// command starts and its ready command passes.
func (b *Builder) finalize(ctx context.Context, st *state) error {
	cfg := st.cfg
	b.logf(st.bd, "info", StepFinalize, "checking the start command %q and ready command %q", cfg.StartCmd, cfg.ReadyCmd)
	t, err := b.store.CommitAs(template.NewBuildID(), st.bd.Template, nil, st.layers, cfg)
	if err != nil {
		return err
	}
	defer b.store.Remove(t.ID, nil)
	sb, err := b.mgr.Create(ctx, sandbox.CreateRequest{KeyID: st.bd.KeyID, Internal: true, Template: t.ID, Timeout: time.Hour,
		Metadata: map[string]string{"hutch.build": st.bd.ID, "hutch.step": StepFinalize}})
	if err != nil {
		return err
	}
	b.mgr.Discard(context.Background(), sb.ID)
	b.logf(st.bd, "info", StepFinalize, "ready")
	return nil
}

// setEnv sets k=v in env (KEY=VALUE entries).
func setEnv(env []string, k, v string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if kk, _, _ := strings.Cut(kv, "="); kk != k {
			out = append(out, kv)
		}
	}
	return append(out, k+"="+v)
}

// expandEnv replaces $VAR and ${VAR} with their values in env (as
// Docker's ENV does with the base's variables: PATH=/x:$PATH), PATH being
// a sandbox's default when env has none.
func expandEnv(s string, env []string) string {
	m := map[string]string{"PATH": envdapi.DefaultPath}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return os.Expand(s, func(k string) string {
		if name, def, ok := strings.Cut(k, ":-"); ok {
			if v := m[name]; v != "" {
				return v
			}
			return def
		}
		return m[k]
	})
}

// resolvePath resolves p against the working directory dir.
func resolvePath(dir, p string) string {
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	if dir == "" {
		dir = "/"
	}
	return path.Join(dir, p)
}

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// logWriter turns a step's output into log lines.
type logWriter struct {
	b    *Builder
	bd   *Build
	step string
	buf  []byte
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			break
		}
		w.b.logf(w.bd, "info", w.step, "%s", strings.TrimRight(string(w.buf[:i]), "\r"))
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 4096 { // a very long line without an end
		w.Flush()
	}
	return len(p), nil
}

// Flush logs what is left of an unfinished line.
func (w *logWriter) Flush() {
	if len(w.buf) > 0 {
		w.b.logf(w.bd, "info", w.step, "%s", string(w.buf))
		w.buf = nil
	}
}

// waitingTTL is how long a requested build waits for its steps before it
// is forgotten.
const waitingTTL = time.Hour

// finishedTTL is how long a finished build's state and log stay in
// memory (its template stays in the store).
const finishedTTL = 24 * time.Hour

// pruneLocked forgets builds that waited too long for their steps and
// finished builds past finishedTTL. b.mu must be held.
func (b *Builder) pruneLocked() {
	now := time.Now()
	for id, bd := range b.builds {
		switch bd.Status {
		case StatusWaiting:
			if now.Sub(bd.Created) > waitingTTL {
				delete(b.builds, id)
			}
		case StatusReady, StatusError:
			if now.Sub(bd.Finished) > finishedTTL {
				delete(b.builds, id)
			}
		}
	}
	// And a key's finished builds, each with its log, beyond its newest
	// maxFinishedPerKey (sixty builds of full logs held a gigabyte, G2):
	// a ready one's status comes from the store after.
	byKey := map[string][]*Build{}
	for _, bd := range b.builds {
		if bd.Status == StatusReady || bd.Status == StatusError {
			byKey[bd.KeyID] = append(byKey[bd.KeyID], bd)
		}
	}
	for _, bds := range byKey {
		if len(bds) <= maxFinishedPerKey {
			continue
		}
		slices.SortFunc(bds, func(x, y *Build) int { return y.Finished.Compare(x.Finished) })
		for _, bd := range bds[maxFinishedPerKey:] {
			delete(b.builds, bd.ID)
		}
	}
}
