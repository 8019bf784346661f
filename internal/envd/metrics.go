package envd

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// metricsResponse is GET /metrics's body (spec §3.6). No SDK reads it; the
// control plane reports sandbox metrics from cgroups instead.
type metricsResponse struct {
	Timestamp   int64   `json:"ts"`
	CPUCount    int     `json:"cpu_count"`
	CPUUsedPct  float64 `json:"cpu_used_pct"`
	MemTotal    uint64  `json:"mem_total"`
	MemUsed     uint64  `json:"mem_used"`
	MemCache    uint64  `json:"mem_cache"`
	MemTotalMiB uint64  `json:"mem_total_mib"`
	MemUsedMiB  uint64  `json:"mem_used_mib"`
	DiskUsed    uint64  `json:"disk_used"`
	DiskTotal   uint64  `json:"disk_total"`
}

// metrics reports what the sandbox can see of itself: the CPUs it may run
// on, load over a short sample, memory from /proc/meminfo (the host's view:
// a sandbox's own limit is in its cgroup, which only the host reads) and
// the root file system's usage.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	m := metricsResponse{Timestamp: time.Now().Unix()}
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) == nil {
		m.CPUCount = set.Count()
	}
	if a, err := cpuTimes(); err == nil {
		time.Sleep(100 * time.Millisecond)
		if b, err := cpuTimes(); err == nil && b[0] > a[0] {
			m.CPUUsedPct = 100 * float64((b[0]-a[0])-(b[1]-a[1])) / float64(b[0]-a[0])
		}
	}
	mem := meminfo()
	m.MemTotal = mem["MemTotal"]
	m.MemCache = mem["Cached"]
	if avail, ok := mem["MemAvailable"]; ok && avail <= m.MemTotal {
		m.MemUsed = m.MemTotal - avail
	}
	m.MemTotalMiB, m.MemUsedMiB = m.MemTotal>>20, m.MemUsed>>20
	var st unix.Statfs_t
	if unix.Statfs("/", &st) == nil {
		m.DiskTotal = st.Blocks * uint64(st.Bsize)
		m.DiskUsed = (st.Blocks - st.Bfree) * uint64(st.Bsize)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(m)
}

// cpuTimes returns total and idle jiffies from /proc/stat.
func cpuTimes() ([2]uint64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return [2]uint64{}, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	var total, idle uint64
	for i, f := range strings.Fields(line)[1:] {
		n, _ := strconv.ParseUint(f, 10, 64)
		total += n
		if i == 3 || i == 4 { // idle, iowait
			idle += n
		}
	}
	return [2]uint64{total, idle}, nil
}

// meminfo returns /proc/meminfo in bytes.
func meminfo() map[string]uint64 {
	out := map[string]uint64{}
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fs := strings.Fields(v)
		if len(fs) == 0 {
			continue
		}
		n, _ := strconv.ParseUint(fs[0], 10, 64)
		if len(fs) > 1 && fs[1] == "kB" {
			n <<= 10
		}
		out[k] = n
	}
	return out
}
