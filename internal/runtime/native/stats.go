package native

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/opencontainers/cgroups"
	cgfs "github.com/opencontainers/cgroups/fs"
	"github.com/opencontainers/cgroups/fs2"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/runtime"
)

// noLimit is above any real memory limit: cgroup v1 reports "no limit" as
// a page-rounded 2^63.
const noLimit = 1 << 62

func (s *sandbox) Stats(ctx context.Context) (runtime.Stats, error) {
	rec, err := s.rt.readRecord(s.id)
	if err != nil {
		return runtime.Stats{}, err
	}
	if len(rec.CgroupPaths) == 0 {
		return runtime.Stats{}, fmt.Errorf("sandbox %s has no cgroups: %w", s.id, errdefs.ErrNotFound)
	}
	cg, err := loadCgroup(rec.CgroupPaths)
	if err != nil {
		return runtime.Stats{}, err
	}
	out, err := statsOf(cg)
	if err != nil {
		return runtime.Stats{}, fmt.Errorf("sandbox %s stats: %w", s.id, err)
	}
	return out, nil
}

// CgroupStats reads Stats from the cgroup at path in every hierarchy
// (an OCI spec's cgroupsPath): for another backend, whose OCI runtime
// made its sandboxes' cgroups (gVisor's runsc).
func CgroupStats(path string) (runtime.Stats, error) {
	cg := &cgroups.Cgroup{Path: path, Resources: &cgroups.Resources{SkipDevices: true}}
	var (
		m   cgroups.Manager
		err error
	)
	if cgroups.IsCgroup2UnifiedMode() {
		m, err = fs2.NewManager(cg, filepath.Join("/sys/fs/cgroup", path))
	} else {
		m, err = cgfs.NewManager(cg, nil)
	}
	if err != nil {
		return runtime.Stats{}, err
	}
	return statsOf(m)
}

// statsOf reads the Stats of cgroup m.
func statsOf(cg cgroups.Manager) (runtime.Stats, error) {
	// Only the controllers read here: the others (blkio above all) cost
	// more than all of these together.
	st, err := cg.Stats(&cgroups.StatsOptions{Controllers: cgroups.CPU | cgroups.Memory | cgroups.Pids})
	if err != nil {
		return runtime.Stats{}, err
	}
	mem := st.MemoryStats
	out := runtime.Stats{
		CPU:         time.Duration(st.CpuStats.CpuUsage.TotalUsage),
		MemoryCache: mem.Cache,
		Pids:        st.PidsStats.Current,
	}
	if l := mem.Usage.Limit; l > 0 && l < noLimit {
		out.MemoryLimit = l
	}
	// In use = usage minus inactive file pages (v2 "inactive_file", v1
	// "total_inactive_file"), which the kernel drops before it would fail
	// an allocation.
	inactive, ok := mem.Stats["inactive_file"]
	if !ok {
		inactive = mem.Stats["total_inactive_file"]
	}
	if inactive < mem.Usage.Usage {
		out.MemoryUsed = mem.Usage.Usage - inactive
	}
	return out, nil
}

func (s *sandbox) DiskUsage(ctx context.Context) (runtime.DiskUsage, error) {
	rec, err := s.rt.readRecord(s.id)
	if err != nil {
		return runtime.DiskUsage{}, err
	}
	if rec.Resources.DiskBytes > 0 {
		// The layer is a file system of its own, mounted only inside the
		// sandbox; an overlay reports its upper file system's usage, so
		// the sandbox's root seen through its init tells it.
		var st unix.Statfs_t
		if err := unix.Statfs("/proc/"+strconv.Itoa(rec.Pid)+"/root", &st); err != nil {
			return runtime.DiskUsage{}, fmt.Errorf("sandbox %s disk: %w", s.id, err)
		}
		return runtime.DiskUsage{Used: (st.Blocks - st.Bfree) * uint64(st.Bsize), Total: st.Blocks * uint64(st.Bsize)}, nil
	}
	upper := filepath.Join(s.rt.dataDir, "sandboxes", s.id, "upper")
	var st unix.Statfs_t
	if err := unix.Statfs(upper, &st); err != nil {
		return runtime.DiskUsage{}, fmt.Errorf("sandbox %s disk: %w", s.id, err)
	}
	used, err := layerSize(ctx, upper)
	if err != nil {
		return runtime.DiskUsage{}, fmt.Errorf("sandbox %s disk: %w", s.id, err)
	}
	return runtime.DiskUsage{Used: used, Total: st.Blocks * uint64(st.Bsize)}, nil
}

// layerSize is the disk space a directory tree's files take (their
// allocated blocks, hard links counted once), as du reports it. Files
// vanishing during the walk are skipped: the sandbox is running.
func layerSize(ctx context.Context, dir string) (uint64, error) {
	var total uint64
	seen := map[uint64]bool{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		if st.Nlink > 1 && !d.IsDir() {
			if seen[st.Ino] {
				return nil
			}
			seen[st.Ino] = true
		}
		total += uint64(st.Blocks) * 512
		return nil
	})
	return total, err
}
