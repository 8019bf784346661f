package main

import (
	"fmt"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
)

// Every sandbox holds host resources of its own (a loop device and its
// disk image, a uid range, tasks, memory up to its limit), so serve caps
// how many run at once, per API key and in all; past a cap a create
// answers 429 (internal/sandbox/limits.go says what counts).
const (
	// defaultPerKey is E2B's concurrency limit for its Pro tier (Hobby
	// has 20): enough for an agent fleet on one key, and it keeps one key
	// from taking every slot of a big host.
	defaultPerKey = 100
	// memoryShare is the fraction of a sandbox's memory limit the default
	// total allows per sandbox: the host's memory divided by limit/8. An
	// idle sandbox costs about 4 MiB of host memory (measured: 20 idle
	// sandboxes of the base template took 81 MiB of MemAvailable), so the
	// cap is far above what idle sandboxes need, while a host at the cap
	// with one sandbox in eight at its memory limit still fits in memory.
	// 512 MiB sandboxes: one per 64 MiB, 16 per GiB of the host's memory.
	memoryShare = 8
)

// sandboxCaps are serve's flags for the number of sandboxes.
type sandboxCaps struct {
	total  int
	perKey int
}

func (c *sandboxCaps) register(fs *pflag.FlagSet) {
	fs.IntVar(&c.total, "max-sandboxes", 0, "sandboxes running at once, all API keys together; a create past it answers 429 (0: one per 64 MiB of the host's memory, an eighth of each sandbox's 512 MiB limit)")
	fs.IntVar(&c.perKey, "max-sandboxes-per-key", defaultPerKey, "sandboxes one API key may have running at once; a create past it answers 429 (0: no cap but --max-sandboxes)")
}

// resolve returns the caps to run with, for sandboxes of memory bytes
// each.
func (c *sandboxCaps) resolve(memory int64) (total, perKey int, err error) {
	if c.total < 0 || c.perKey < 0 {
		return 0, 0, fmt.Errorf("--max-sandboxes and --max-sandboxes-per-key cannot be negative")
	}
	total = c.total
	if total == 0 {
		var si unix.Sysinfo_t
		if err := unix.Sysinfo(&si); err != nil {
			return 0, 0, fmt.Errorf("host memory: %w", err)
		}
		total = defaultTotal(uint64(si.Totalram)*uint64(si.Unit), memory)
	}
	return total, c.perKey, nil
}

// defaultTotal is --max-sandboxes's default on a host with ram bytes of
// memory, for sandboxes limited to memory bytes each (> 0): at least 1.
func defaultTotal(ram uint64, memory int64) int {
	share := max(uint64(memory)/memoryShare, 1)
	return int(max(ram/share, 1))
}
