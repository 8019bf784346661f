package sandbox

import (
	"context"
	"math"
	goruntime "runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/runtime"
)

const (
	// metricsInterval is how often every running sandbox is sampled.
	metricsInterval = 5 * time.Second
	// metricsKept is how far back samples are kept (in memory: metrics do
	// not survive a restart of the server).
	metricsKept = 15 * time.Minute
	// diskInterval is how often the writable layer is measured; that may
	// walk it, so less often than the cgroups are read.
	diskInterval = 30 * time.Second
)

// Metric is one sample of a sandbox's resource use, as E2B reports it.
type Metric struct {
	Time time.Time
	// CPUCount is the cores the sandbox may use.
	CPUCount int
	// CPUUsedPct is the share of those cores used since the sample before,
	// 0–100 (0 in the first sample).
	CPUUsedPct float64
	// MemUsed is memory in use without reclaimable cache; MemTotal the
	// sandbox's limit (the host's memory without one).
	MemUsed, MemTotal, MemCache uint64
	// DiskUsed is what the sandbox wrote; DiskTotal its limit (the host
	// file system's size without one).
	DiskUsed, DiskTotal uint64
}

// series is the recent samples of one sandbox.
type series struct {
	sbx      runtime.Sandbox
	cpuCount int

	mu      sync.Mutex
	samples []Metric
	lastCPU time.Duration
	lastAt  time.Time
	disk    runtime.DiskUsage
	diskAt  time.Time
}

func newSeries(sbx runtime.Sandbox, res runtime.Resources) *series {
	n := goruntime.NumCPU()
	if res.CPUs > 0 {
		n = min(n, int(math.Ceil(res.CPUs)))
	}
	return &series{sbx: sbx, cpuCount: n}
}

// sample reads the sandbox's use now and appends it.
func (s *series) sample(ctx context.Context, now time.Time) error {
	st, err := s.sbx.Stats(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	diskDue := s.diskAt.IsZero() || now.Sub(s.diskAt) >= diskInterval
	s.mu.Unlock()
	var du runtime.DiskUsage
	if diskDue {
		if du, err = s.sbx.DiskUsage(ctx); err != nil {
			return err
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if diskDue {
		s.disk, s.diskAt = du, now
	}
	m := Metric{Time: now, CPUCount: s.cpuCount, MemUsed: st.MemoryUsed, MemCache: st.MemoryCache,
		MemTotal: st.MemoryLimit, DiskUsed: s.disk.Used, DiskTotal: s.disk.Total}
	if m.MemTotal == 0 {
		m.MemTotal = hostMemory()
	}
	// The first sample is the baseline: its CPU share is 0, not the
	// sandbox's start-up (or time in the warm pool) over a few milliseconds.
	if elapsed := now.Sub(s.lastAt); !s.lastAt.IsZero() && elapsed > 0 && st.CPU >= s.lastCPU {
		pct := 100 * float64(st.CPU-s.lastCPU) / (float64(elapsed) * float64(s.cpuCount))
		m.CPUUsedPct = math.Round(min(pct, 100)*100) / 100
	}
	s.lastCPU, s.lastAt = st.CPU, now
	s.samples = append(s.samples, m)
	// Drop what is older than metricsKept.
	i := 0
	for i < len(s.samples) && now.Sub(s.samples[i].Time) > metricsKept {
		i++
	}
	s.samples = s.samples[i:]
	return nil
}

// between returns the samples taken in [start, end]; a zero bound is open.
func (s *series) between(start, end time.Time) []Metric {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []Metric{}
	for _, m := range s.samples {
		if (start.IsZero() || !m.Time.Before(start)) && (end.IsZero() || !m.Time.After(end)) {
			out = append(out, m)
		}
	}
	return out
}

// latest returns the newest sample, if any.
func (s *series) latest() (Metric, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) == 0 {
		return Metric{}, false
	}
	return s.samples[len(s.samples)-1], true
}

func hostMemory() uint64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return 0
	}
	return uint64(si.Totalram) * uint64(si.Unit)
}

// sampleLoop samples every running sandbox each metricsInterval until the
// manager is closed.
func (m *Manager) sampleLoop() {
	tick := time.NewTicker(metricsInterval)
	defer tick.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case now := <-tick.C:
			m.mu.Lock()
			all := make(map[string]*series, len(m.live))
			for id, l := range m.live {
				all[id] = l.metrics
			}
			m.mu.Unlock()
			for id, s := range all {
				ctx, cancel := context.WithTimeout(context.Background(), metricsInterval)
				if err := s.sample(ctx, now); err != nil {
					m.logger.Debug("sample sandbox", "id", id, "err", err)
				}
				cancel()
			}
		}
	}
}

// Metrics returns the samples of a sandbox the key may see taken between
// start and end (zero bounds are open), oldest first.
func (m *Manager) Metrics(ctx context.Context, keyID, id string, start, end time.Time) ([]Metric, error) {
	if _, err := m.store.GetSandbox(ctx, keyID, id); err != nil {
		return nil, err
	}
	m.mu.Lock()
	l := m.live[id]
	m.mu.Unlock()
	if l == nil {
		return []Metric{}, nil
	}
	return l.metrics.between(start, end), nil
}

// LatestMetrics returns the newest sample of each of the sandboxes the key
// may see; ids it cannot see or that have no sample yet are left out.
func (m *Manager) LatestMetrics(ctx context.Context, keyID string, ids []string) (map[string]Metric, error) {
	out := map[string]Metric{}
	for _, id := range ids {
		if _, err := m.store.GetSandbox(ctx, keyID, id); err != nil {
			continue
		}
		m.mu.Lock()
		l := m.live[id]
		m.mu.Unlock()
		if l == nil {
			continue
		}
		if s, ok := l.metrics.latest(); ok {
			out[id] = s
		}
	}
	return out, nil
}
