package metrics

import (
	"context"
	goruntime "runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
)

// Census is what a server holds at one moment, read at each scrape (see
// NewCensusCollector).
type Census struct {
	// Sandboxes are the sandboxes, counted by state and template. Only
	// non-zero counts need be given: a state and template with none has
	// no series (a gauge that vanishes reads as 0 in sums).
	Sandboxes []SandboxCount
	// Pools are the warm pools, one per template that has one.
	Pools []PoolCount
	// CPUsCommitted and MemoryCommittedBytes are the limits of what runs
	// (running sandboxes, warm ones, and, for memory, those paused with
	// their memory held): what the node promised, whatever is in use.
	CPUsCommitted        float64
	MemoryCommittedBytes uint64
	// MaxSandboxes is the cap on running sandboxes (0: none).
	MaxSandboxes int
}

// SandboxCount is how many sandboxes are in State, of Template.
type SandboxCount struct {
	// State is the sandbox's state, as the API reports it ("running",
	// "paused").
	State string
	// Template is the template's name, or a fixed stand-in for what is
	// not one (see docs/metrics.md): never a snapshot's or sandbox's id.
	Template string
	Count    int
}

// PoolCount is the warm pool of Template: Ready sandboxes waiting out of
// the Size it is kept at.
type PoolCount struct {
	Template    string
	Ready, Size int
}

// censusTimeout bounds one reading of the census: a scrape must not hang
// on a busy store.
const censusTimeout = 5 * time.Second

// censusCollector serves a Census function's answer as gauges.
type censusCollector struct {
	read func(context.Context) (Census, error)

	sandboxes, poolReady, poolSize, cpus, memory, maxSandboxes *prometheus.Desc
}

// NewCensusCollector returns a collector that calls read at each scrape
// and reports what it says as gauges: hutch_sandboxes{state,template},
// hutch_pool_ready_sandboxes{template}, hutch_pool_size_sandboxes{template},
// hutch_node_committed_cpus, hutch_node_committed_memory_bytes and
// hutch_node_max_sandboxes. An error of read fails those metrics for that
// scrape (the others are still served, see Handler). read must be safe
// for concurrent use.
func NewCensusCollector(read func(context.Context) (Census, error)) prometheus.Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, nil)
	}
	return &censusCollector{
		read:         read,
		sandboxes:    d("sandboxes", "Sandboxes on this node, by state (running, paused) and template ((snapshot) for those made from a user's snapshot, (removed) for those of a template since removed).", "state", "template"),
		poolReady:    d("pool_ready_sandboxes", "Warm sandboxes ready to be handed out, by template.", "template"),
		poolSize:     d("pool_size_sandboxes", "The size each warm pool is kept at (--warm, --warm-template), by template.", "template"),
		cpus:         d("node_committed_cpus", "CPUs promised to what runs on this node: the CPU limits of running and warm sandboxes."),
		memory:       d("node_committed_memory_bytes", "Memory promised to what runs on this node: the memory limits of running and warm sandboxes and of those paused with their memory."),
		maxSandboxes: d("node_max_sandboxes", "The cap on sandboxes running at once on this node (--max-sandboxes; 0: none)."),
	}
}

// Describe sends every metric's description.
func (c *censusCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.sandboxes, c.poolReady, c.poolSize, c.cpus, c.memory, c.maxSandboxes} {
		ch <- d
	}
}

// Collect reads the census and sends it.
func (c *censusCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), censusTimeout)
	defer cancel()
	cen, err := c.read(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.sandboxes, err)
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	// Counts of one state and template are summed: two stand-ins of
	// different causes may meet under one label.
	type key struct{ state, template string }
	sums := map[key]int{}
	var order []key
	for _, s := range cen.Sandboxes {
		k := key{s.State, s.Template}
		if _, ok := sums[k]; !ok {
			order = append(order, k)
		}
		sums[k] += s.Count
	}
	for _, k := range order {
		gauge(c.sandboxes, float64(sums[k]), k.state, k.template)
	}
	for _, p := range cen.Pools {
		gauge(c.poolReady, float64(p.Ready), p.Template)
		gauge(c.poolSize, float64(p.Size), p.Template)
	}
	gauge(c.cpus, cen.CPUsCommitted)
	gauge(c.memory, float64(cen.MemoryCommittedBytes))
	gauge(c.maxSandboxes, float64(cen.MaxSandboxes))
}

// hostCollector reports the node's own capacity, read at each scrape:
// what the committed figures of the census are measured against.
type hostCollector struct {
	cpus, memory, available *prometheus.Desc
}

func newHostCollector() *hostCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, nil, nil)
	}
	return &hostCollector{
		cpus:      d("node_cpus", "CPUs this node's sandboxes may run on (those the server's process may use)."),
		memory:    d("node_memory_bytes", "This node's memory (MemTotal)."),
		available: d("node_memory_available_bytes", "This node's memory available to new work without swapping (MemAvailable)."),
	}
}

// Describe sends every metric's description.
func (c *hostCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.cpus
	ch <- c.memory
	ch <- c.available
}

// Collect reads the host's figures.
func (c *hostCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.cpus, prometheus.GaugeValue, float64(goruntime.NumCPU()))
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.memory, err)
		return
	}
	mi, err := fs.Meminfo()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.memory, err)
		return
	}
	if mi.MemTotalBytes != nil {
		ch <- prometheus.MustNewConstMetric(c.memory, prometheus.GaugeValue, float64(*mi.MemTotalBytes))
	}
	if mi.MemAvailableBytes != nil {
		ch <- prometheus.MustNewConstMetric(c.available, prometheus.GaugeValue, float64(*mi.MemAvailableBytes))
	}
}
