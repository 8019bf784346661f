package gvisor

import (
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/hutch-sandbox/hutch/internal/runtime/gvisor/link"
	"github.com/hutch-sandbox/hutch/internal/runtime/native"
)

// envGuestInit marks the sandbox binary's run as a gVisor sandbox's PID 1
// (see GuestInit).
const envGuestInit = "HUTCH_GVISOR_INIT"

// defaultCaps is what root in a sandbox holds: Docker's default set. The
// sentry enforces them against its own kernel, never the host's.
var defaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// ociSpec is the bundle's config.json: PID 1 is the sandbox binary as
// GuestInit, which runs proc; the root is the read-only rootfs (runsc
// lays its own writable overlay on it, in upper/), the sandbox binary is
// bound in read-only at guestBinary, volumes at their targets, then image
// roots (imagesSpec).
func (rt *Runtime) ociSpec(dir string, rec *record, proc *process, hostname string) (*specs.Spec, error) {
	env := append([]string{envGuestInit + "=1"}, proc.Env...)
	if rec.Channels > 0 {
		env = append(env, link.EnvChannels+"="+strconv.Itoa(rec.Channels))
	}
	caps := &specs.LinuxCapabilities{Bounding: defaultCaps, Effective: defaultCaps, Permitted: defaultCaps}
	if proc.UID != 0 {
		// A user's process starts without any; setuid binaries (sudo) give
		// them back, unless no_new_privs.
		caps.Effective, caps.Permitted = nil, nil
	}
	rlimits := []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1 << 20, Soft: 1 << 20}}
	if rec.Resources.Pids > 0 {
		// The inner, friendly bound: fork fails with EAGAIN inside. It is
		// per uid, so root inside, who may switch uids, is bounded only by
		// hostPids (resources).
		n := uint64(rec.Resources.Pids)
		rlimits = append(rlimits, specs.POSIXRlimit{Type: "RLIMIT_NPROC", Hard: n, Soft: n})
	}
	s := &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			Terminal: proc.Terminal,
			User:     specs.User{UID: proc.UID, GID: proc.GID, AdditionalGids: proc.Groups},
			// PID 1 is GuestInit; it runs the first process as its child.
			Args:            append([]string{guestBinary}, proc.Args...),
			Env:             env,
			Cwd:             proc.Cwd,
			Capabilities:    caps,
			Rlimits:         rlimits,
			NoNewPrivileges: rec.NoNewPrivileges,
		},
		Root:     &specs.Root{Path: filepath.Join(dir, "rootfs"), Readonly: false},
		Hostname: hostname,
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: guestBinary, Type: "bind", Source: rt.binary, Options: []string{"rbind", "ro"}},
		},
		Linux: &specs.Linux{
			UIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: uint32(rec.HostID), Size: uint32(rec.IDs)}},
			GIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: uint32(rec.HostID), Size: uint32(rec.IDs)}},
			// Its own network namespace is the shim's: runsc runs with
			// --network=host inside it (see doc.go).
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
				{Type: specs.MountNamespace}, {Type: specs.UserNamespace},
			},
			CgroupsPath: rt.cgroupsPath(rec.ID),
			Resources:   resources(rec),
		},
	}
	for i, m := range rec.Mounts {
		// nosuid and nodev as natively: a set-user-ID file or a device
		// node one sandbox plants on a shared volume is nothing in another.
		opts := []string{"rbind", "rw", "nosuid", "nodev"}
		if m.ReadOnly {
			opts[1] = "ro"
		}
		s.Mounts = append(s.Mounts, specs.Mount{Destination: m.Target, Type: "bind", Source: filepath.Join(dir, "vol", strconv.Itoa(i)), Options: opts})
	}
	// After the volumes, as natively: an image root's mount point may be
	// in one.
	if err := imagesSpec(s, dir, rec, proc); err != nil {
		return nil, err
	}
	return s, nil
}

// cgroupsPath is where runsc puts sandbox id's cgroups, under each
// hierarchy (v1) or the unified one: under a directory of this data dir's
// own, so that a runtime sweeps (Sweep) only its own sandboxes' leftovers.
func (rt *Runtime) cgroupsPath(id string) string {
	h := fnv.New32a()
	h.Write([]byte(rt.dataDir))
	return fmt.Sprintf("/hutch-gvisor/%08x/%s", h.Sum32(), id)
}

// resources are the sandbox's cgroup limits.
func resources(rec *record) *specs.LinuxResources {
	r := &specs.LinuxResources{}
	if p := rec.Resources.Pids; p > 0 {
		n := hostPids(p)
		r.Pids = &specs.LinuxPids{Limit: &n}
	}
	if m := rec.Resources.MemoryBytes; m > 0 {
		r.Memory = &specs.LinuxMemory{Limit: &m, Swap: &m}
		if tcp := native.TCPMemory(m); tcp > 0 && cgroupV1Memory() {
			// The sandbox's sockets are the host's (--network=host), made
			// by the Sentry in this cgroup. Cgroup v1 charges their
			// buffers only once memory.kmem.tcp.limit_in_bytes is set,
			// and only those of sockets made after: runsc sets it when it
			// makes the cgroup, before the sandbox runs (review 23, F3: 634
			// MB of buffers on the host, 46 MB charged). v2 charges them
			// with the rest.
			r.Memory.KernelTCP = &tcp
		}
	}
	if c := rec.Resources.CPUs; c > 0 {
		period := uint64(100000)
		quota := int64(c * float64(period))
		r.CPU = &specs.LinuxCPU{Period: &period, Quota: &quota}
	}
	return r
}

// hostPids is the pids.max of runsc's cgroup for a sandbox limited to
// pids processes and threads: the outer bound on the host's tasks a
// sandbox makes (review 23, F1). The inner one, RLIMIT_NPROC, counts per
// uid, and root inside switches uids for a fresh budget each time; under
// systrap every guest address space is a stub process on the host, so
// without this a sandbox's host tasks were bounded only by its memory
// (2,462 tasks for a 512 MiB one).
//
// Measured here (runsc systrap, 2 cores): a sandbox idle is 25 host tasks
// (the Sentry's and gofer's threads, a few stubs); each guest process
// adds 2 (its stub process and that stub's thread serving it: 50
// processes 133, 200 processes 431), each guest thread that runs adds at
// most 1 (64 busy threads 94), a blocked one nothing (400 threads 26).
// So a sandbox within --pids under one uid needs at most about
// 2*pids + 25: three times pids plus room for runsc's own threads (which
// grow with load) keeps that clear of the bound, which ends the sandbox
// when reached — pids.max counts runsc's own threads too, and the Sentry
// does not survive a failed clone of its own. What reaches it is a
// sandbox that switched uids past its limit; it ends whole, and the
// server reports it gone.
func hostPids(pids int64) int64 {
	return 3*pids + runscTasks
}

// runscTasks is room for runsc's own host tasks, beyond what the guest's
// make: see hostPids.
const runscTasks = 128

// cgroupV1Memory reports whether the memory controller is cgroup v1's
// (a v1 or hybrid host), where TCP buffers have a limit of their own.
func cgroupV1Memory() bool {
	_, err := os.Stat("/sys/fs/cgroup/memory/memory.kmem.tcp.limit_in_bytes")
	return err == nil
}
