package harness

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// PeerVersions names the installed version of each tool (run with
// --version), or says it is not installed.
func PeerVersions(tools ...string) string {
	var out []string
	for _, t := range tools {
		b, err := exec.Command(t, "--version").Output()
		if err != nil {
			out = append(out, t+" (not installed)")
			continue
		}
		line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		out = append(out, strings.Join(strings.Fields(line), " "))
	}
	return strings.Join(out, ", ")
}

// PrintLoad shows how busy the machine is over one second: other work on a
// 2-core machine shows up directly in the numbers, the tails first.
func PrintLoad(when string) {
	busy, err := CPUBusy(time.Second)
	if err != nil {
		return
	}
	fmt.Printf("CPU busy %s (1 s sample, all CPUs): %.0f%%\n", when, 100*busy)
	if busy > 0.15 && when == "before" {
		fmt.Println("warning: the machine is not idle; expect noisy numbers (let it settle and run again)")
	}
}

// CPUBusy samples the aggregate "cpu" line of /proc/stat over d.
func CPUBusy(d time.Duration) (float64, error) {
	i0, t0, err := CPUSample()
	if err != nil {
		return 0, err
	}
	time.Sleep(d)
	i1, t1, err := CPUSample()
	if err != nil || t1 == t0 {
		return 0, err
	}
	return 1 - float64(i1-i0)/float64(t1-t0), nil
}

// CPUSample reads the idle and total jiffies of all CPUs from /proc/stat.
func CPUSample() (idle, total uint64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0, errors.New("unexpected /proc/stat")
	}
	for i, v := range f[1:] {
		n, _ := strconv.ParseUint(v, 10, 64)
		total += n
		if i == 3 || i == 4 { // idle, iowait
			idle += n
		}
	}
	return idle, total, nil
}

// MountBundleRootfs mounts rootfs, read-only and idmapped to the root of
// the OCI bundle's containers (its one uid mapping), on ociRootfs, in this
// process's private mount namespace only. It returns the mapping's host id.
func MountBundleRootfs(bundle, rootfs, ociRootfs string) (int, error) {
	var spec struct {
		Linux struct {
			UIDMappings []struct {
				HostID int `json:"hostID"`
				Size   int `json:"size"`
			} `json:"uidMappings"`
		} `json:"linux"`
	}
	data, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return 0, fmt.Errorf("OCI bundle not prepared (run the bench's script): %w", err)
	}
	if err := json.Unmarshal(data, &spec); err != nil {
		return 0, fmt.Errorf("%s/config.json: %w", bundle, err)
	}
	if len(spec.Linux.UIDMappings) != 1 {
		return 0, fmt.Errorf("%s/config.json: expected one uid mapping", bundle)
	}
	m := spec.Linux.UIDMappings[0]
	return m.HostID, MountIdmapped(rootfs, ociRootfs, m.HostID, m.Size)
}

// OneLine shortens a tool's output to its last line (usually the error
// itself), at most 200 bytes.
func OneLine(s string) string {
	s = strings.TrimSpace(s)
	// The last line of a tool's stderr is usually the error itself.
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[i+1:])
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// CPUModel names the machine's CPU, for the results' header.
func CPUModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// MemTotal is the machine's RAM, for the results' header.
func MemTotal() string {
	b, _ := os.ReadFile("/proc/meminfo")
	for _, l := range strings.Split(string(b), "\n") {
		var kb int64
		if _, err := fmt.Sscanf(l, "MemTotal: %d kB", &kb); err == nil {
			return fmt.Sprintf("%.0f GiB RAM", float64(kb)/(1<<20))
		}
	}
	return "? RAM"
}

// CgroupMode says whether the host runs cgroup v1, v2 or both (hybrid).
func CgroupMode() string {
	var st unix.Statfs_t
	if unix.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		return "cgroup v2"
	}
	if unix.Statfs("/sys/fs/cgroup/unified", &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		return "hybrid cgroups"
	}
	return "cgroup v1"
}

// Machine describes this machine for a results header: host name, CPU
// model, CPU count, cgroup mode, kernel and memory.
func Machine() string {
	host, _ := os.Hostname()
	var uts unix.Utsname
	unix.Uname(&uts)
	return fmt.Sprintf("%s, %s, nproc %d (%s), Linux %s, %s", host, CPUModel(), runtime.NumCPU(), CgroupMode(),
		unix.ByteSliceToString(uts.Release[:]), MemTotal())
}
