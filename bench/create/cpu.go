package main

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Host CPU per sandbox: what the whole host spent, all CPUs, from before a
// series' first create to after its last kill, minus what the client
// itself spent over the same span, divided by the series' iterations. The
// host's side is /proc/stat's busy jiffies, so the kernel's own work for
// the sandboxes (their namespaces, cgroups, mounts, links, and the kernel
// threads that clean up after them) is counted wherever it runs; the price
// is that anything else running on the machine is counted too.

// cpuMark is one end of such a span.
type cpuMark struct {
	busy uint64        // busy jiffies of all CPUs (busyJiffies); 0 if unreadable
	self time.Duration // this process's own CPU time (user + system, all threads)
	ok   bool
}

func markCPU() cpuMark {
	busy, err := busyJiffies()
	var ru unix.Rusage
	if err != nil || unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return cpuMark{}
	}
	self := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return cpuMark{busy: busy, self: self, ok: true}
}

// busyJiffies is the time all CPUs were busy since boot, in USER_HZ ticks:
// user, nice, system, irq, softirq and steal of /proc/stat's "cpu" line.
// Not idle and iowait (a CPU waiting for I/O does nothing), and not guest
// and guest_nice, which user and nice already include. Steal is counted:
// on a VM it is time this machine's vCPUs wanted and did not get.
// create.mjs reads the same fields.
func busyJiffies() (uint64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, errors.New("unexpected /proc/stat")
	}
	var busy uint64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system; irq softirq steal
		n, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return 0, err
		}
		busy += n
	}
	return busy, nil
}

// userHZ is the unit of /proc/stat: sysconf(_SC_CLK_TCK), which glibc takes
// from the kernel's AT_CLKTCK in the auxiliary vector (this binary has no
// libc); 100 when that is missing, the value on every Linux architecture.
var userHZ = sync.OnceValue(func() float64 {
	const atClkTck = 17 // <elf.h>
	if auxv, err := unix.Auxv(); err == nil {
		for _, kv := range auxv {
			if kv[0] == atClkTck && kv[1] > 0 {
				return float64(kv[1])
			}
		}
	}
	return 100
})

// hostCPUms is host CPU per iteration in ms: jiffies busy over the span,
// less the client's CPU over it, over iters; false when there were none.
func hostCPUms(jiffies uint64, client time.Duration, iters int) (float64, bool) {
	if iters <= 0 {
		return 0, false
	}
	host := float64(jiffies) / userHZ() * 1000
	return (host - float64(client)/float64(time.Millisecond)) / float64(iters), true
}

// hostCPU is hostCPUms between two marks of this process, the client being
// this process (the Go SDK rows; the peers' rows, where the CLIs it forks
// are children with their own CPU time, counted as the host's).
func hostCPU(a, b cpuMark, iters int) (float64, bool) {
	if !a.ok || !b.ok || b.busy < a.busy {
		return 0, false
	}
	return hostCPUms(b.busy-a.busy, b.self-a.self, iters)
}
