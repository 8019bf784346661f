package gvisor

import (
	"fmt"
	"hash/fnv"
	"path/filepath"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/hutch-sandbox/hutch/internal/runtime/gvisor/link"
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
// bound in read-only at guestBinary, volumes at their targets.
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
		// pids.max counts the host's tasks of runsc (its own threads
		// included) and crashes the sandbox when reached: the sentry's
		// own limit on its processes bounds them instead.
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

// resources are the sandbox's cgroup limits. Pids are bounded with
// RLIMIT_NPROC instead (ociSpec).
func resources(rec *record) *specs.LinuxResources {
	r := &specs.LinuxResources{}
	if m := rec.Resources.MemoryBytes; m > 0 {
		r.Memory = &specs.LinuxMemory{Limit: &m, Swap: &m}
	}
	if c := rec.Resources.CPUs; c > 0 {
		period := uint64(100000)
		quota := int64(c * float64(period))
		r.CPU = &specs.LinuxCPU{Period: &period, Quota: &quota}
	}
	return r
}
