package native

import (
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/template"
)

// setupRootfs builds the sandbox's root in its own mount namespace and
// enters it: overlay(idmapped template, private upper), a fresh /proc and
// /sys, a minimal /dev; then pivot_root and detach everything of the host.
func setupRootfs(cfg *initConfig, mountFds []int) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	root := filepath.Join(cfg.Dir, "rootfs")
	if cfg.Layers < 1 || len(mountFds) < cfg.Layers {
		return fmt.Errorf("attach template: %d layers, %d mounts", cfg.Layers, len(mountFds))
	}
	// The template's layers at lower/0 (bottom) .. lower/N-1 (top);
	// overlayfs wants them top first.
	lowers := make([]string, cfg.Layers)
	for i := 0; i < cfg.Layers; i++ {
		lower := filepath.Join("lower", strconv.Itoa(i))
		if err := unix.MoveMount(mountFds[i], "", unix.AT_FDCWD, filepath.Join(cfg.Dir, lower), unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("attach template layer %d: %w", i, err)
		}
		lowers[cfg.Layers-1-i] = lower
	}
	layer := cfg.Dir
	if cfg.Disk {
		// The writable layer lives on the sandbox's own file system.
		layer = filepath.Join(cfg.Dir, "disk")
		if len(mountFds) <= cfg.Layers {
			return fmt.Errorf("attach disk layer: no mount")
		}
		if err := unix.MoveMount(mountFds[cfg.Layers], "", unix.AT_FDCWD, layer, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("attach disk layer: %w", err)
		}
		for _, d := range []string{"upper", "work"} {
			if err := os.Mkdir(filepath.Join(layer, d), 0o755); err != nil {
				return fmt.Errorf("disk layer: %w", err)
			}
		}
	}
	// The volumes' mounts come last; they are attached once the root is
	// complete, below.
	nroot := cfg.Layers
	if cfg.Disk {
		nroot++
	}
	nimage := 0
	for _, img := range cfg.Images {
		nimage += img.Layers
	}
	if len(mountFds) != nroot+len(cfg.Mounts)+nimage {
		return fmt.Errorf("attach mounts: %d mounts for %d volumes and %d image layers", len(mountFds)-nroot, len(cfg.Mounts), nimage)
	}
	volumeFds := mountFds[nroot : nroot+len(cfg.Mounts)]
	imageFds := mountFds[nroot+len(cfg.Mounts):]
	for _, fd := range mountFds[:nroot] {
		unix.Close(fd)
	}
	// Layers named relative to the sandbox directory: overlayfs shows the
	// paths it was given in /proc/self/mountinfo, and the host's data dir
	// is none of the sandbox's business.
	if err := unix.Chdir(cfg.Dir); err != nil {
		return fmt.Errorf("sandbox dir: %w", err)
	}
	rel := func(p string) string { r, _ := filepath.Rel(cfg.Dir, p); return r }
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,userxattr,volatile", strings.Join(lowers, ":"), rel(filepath.Join(layer, "upper")), rel(filepath.Join(layer, "work")))
	// The mount's source names the build: the sandbox's mount table keeps
	// it, and its layers, in the store while the sandbox lives.
	if err := unix.Mount(template.MountSource(cfg.TemplateID), root, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount overlay root: %w", err)
	}

	const noexec = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	type mnt struct {
		src, target, fstype string
		flags               uintptr
		data                string
	}
	mounts := []mnt{
		{"proc", "proc", "proc", noexec, ""},
		{"sysfs", "sys", "sysfs", noexec | unix.MS_RDONLY, ""},
		{"tmpfs", "dev", "tmpfs", unix.MS_NOSUID | unix.MS_STRICTATIME, "mode=755,size=65536k"},
		// max: ptys come from one host-wide pool (kernel.pty.max), which
		// one sandbox could otherwise empty for all.
		{"devpts", "dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, fmt.Sprintf("newinstance,ptmxmode=0666,mode=0620,gid=5,max=%d", MaxPtys)},
		{"tmpfs", "dev/shm", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777,size=65536k"},
		{"mqueue", "dev/mqueue", "mqueue", noexec, ""},
	}
	for _, m := range mounts {
		// Each mount point is found beneath the root without following a
		// link: before pivot_root a link in the template or the sandbox's
		// own layer (a fork's, a snapshot's) resolves against the host's
		// tree, and a /proc or /sys elsewhere would leave the masks below
		// applied to nothing (review 27, F4 and F7).
		dir, err := dirBeneath(root, m.target)
		if err != nil {
			return err
		}
		err = unix.Mount(m.src, fdPath(dir), m.fstype, m.flags, m.data)
		unix.Close(dir)
		if err != nil {
			return fmt.Errorf("mount /%s: %w", m.target, err)
		}
	}
	// A user namespace cannot mknod: bind the few safe devices from the host.
	for _, d := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		target := filepath.Join(root, "dev", d)
		if err := os.WriteFile(target, nil, 0o666); err != nil {
			return fmt.Errorf("create /dev/%s: %w", d, err)
		}
		if err := unix.Mount("/dev/"+d, target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind /dev/%s: %w", d, err)
		}
	}
	links := map[string]string{
		"dev/ptmx": "pts/ptmx", "dev/fd": "/proc/self/fd", "dev/stdin": "/proc/self/fd/0",
		"dev/stdout": "/proc/self/fd/1", "dev/stderr": "/proc/self/fd/2", "dev/core": "/proc/kcore",
	}
	for l, target := range links {
		if err := os.Symlink(target, filepath.Join(root, l)); err != nil {
			return fmt.Errorf("symlink /%s: %w", l, err)
		}
	}
	if err := writeEtc(root, cfg.Hostname); err != nil {
		return err
	}
	for i, target := range cfg.Mounts {
		err := attachAt(root, target, volumeFds[i])
		unix.Close(volumeFds[i])
		if err != nil {
			for _, fd := range volumeFds[i+1:] {
				unix.Close(fd)
			}
			for _, fd := range imageFds {
				unix.Close(fd)
			}
			return err
		}
	}
	if err := mountImages(cfg, root, layer, imageFds); err != nil {
		return err
	}

	// pivot_root(".", ".") stacks the old root on top of the new one, so it
	// can be detached without a directory to park it in (runc does the same).
	if err := unix.Chdir(root); err != nil {
		return fmt.Errorf("chdir rootfs: %w", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach host root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	return nil
}

// attachAt attaches the detached mount mfd at target (an absolute path in
// the sandbox, checked by runtime.CheckMountTarget) under root, making
// the missing directories on the way. Each component is opened beneath
// the one before with openat2, refusing symlinks outright: the template
// and the sandbox's layer are not trusted, and before pivot_root a link
// would resolve against the host's tree. (filepath-securejoin's
// MkdirAllHandle follows links inside the root, which is more than a
// mount point needs; this is the few lines it takes to refuse them.)
func attachAt(root, target string, mfd int) error {
	dir, err := dirBeneath(root, target)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	if err := unix.MoveMount(mfd, "", dir, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount %s: %w", target, err)
	}
	return nil
}

// dirBeneath opens directory target (relative to root, or absolute in the
// sandbox) as an O_PATH descriptor, making the missing directories on the
// way. Each component is opened beneath the one before with openat2,
// refusing symlinks outright: a path that is a link or not a directory is
// the caller's bad input (errdefs.ErrInvalidArgument), never followed.
func dirBeneath(root, target string) (int, error) {
	cur, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("/%s: %w", strings.Trim(target, "/"), err)
	}
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	shown := "/" + strings.Trim(filepath.Clean("/"+target), "/")
	for _, name := range strings.Split(strings.Trim(filepath.Clean("/"+target), "/"), "/") {
		if err := unix.Mkdirat(cur, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			unix.Close(cur)
			return -1, fmt.Errorf("%s: make %s: %w", shown, name, err)
		}
		next, err := unix.Openat2(cur, name, how)
		unix.Close(cur)
		if err != nil {
			if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EXDEV) {
				return -1, fmt.Errorf("%s: %s is a symlink or not a directory in the sandbox's root: %w", shown, name, errdefs.ErrInvalidArgument)
			}
			return -1, fmt.Errorf("%s: open %s: %w", shown, name, err)
		}
		cur = next
	}
	return cur, nil
}

// fdPath names descriptor fd for a call that takes a path (mount(2)):
// the kernel resolves the magic link to the very directory fd is, not to
// a name someone could swap. Before pivot_root /proc is the host's.
func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// writeEtc writes the per-sandbox files of /etc into the private layer.
// /etc itself is found without following a link (dirBeneath: a sandbox
// that made its /etc a link to /tmp had its next start write the host's
// /tmp, review 27 F2); each file is replaced, never written through.
func writeEtc(root, hostname string) error {
	files := map[string]string{
		"hostname":    hostname + "\n",
		"hosts":       "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t" + hostname + "\n",
		"resolv.conf": "",
	}
	etc, err := dirBeneath(root, "etc")
	if err != nil {
		return err
	}
	defer unix.Close(etc)
	for name, content := range files {
		if err := replaceAt(etc, name, content); err != nil {
			return fmt.Errorf("write /etc/%s: %w", name, err)
		}
	}
	return nil
}

// replaceAt makes name in directory dir a new regular file holding
// content, whatever was there (a link, a file, an empty directory).
func replaceAt(dir int, name, content string) error {
	if err := unix.Unlinkat(dir, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		if !errors.Is(err, unix.EISDIR) {
			return err
		}
		if err := unix.Unlinkat(dir, name, unix.AT_REMOVEDIR); err != nil {
			return err
		}
	}
	fd, err := unix.Openat(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// maskedPaths hide kernel information a sandbox has no business reading
// (Docker's list); readonlyPaths stop writes to kernel knobs.
var (
	maskedPaths = []string{
		"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys",
		"/proc/latency_stats", "/proc/sched_debug", "/proc/scsi", "/proc/timer_list",
		"/proc/timer_stats", "/sys/firmware", "/sys/devices/virtual/powercap",
		// Beyond Docker's list. The host's block devices: each sandbox's
		// disk is a loop device whose backing_file names the host's data
		// dir and the sandbox's id, so every sandbox could list its
		// neighbours'. A sandbox has no block device of its own to see.
		"/sys/block", "/sys/class/block", "/sys/dev/block", "/sys/devices/virtual/block",
		// What the kernel keeps per block device and per ext4 file system:
		// every sandbox's disk's write counters (lifetime_write_kbytes,
		// diskstats), free-space layout and writeback devices, which told
		// one sandbox what another wrote, and when (review 10, F1).
		"/sys/fs/ext4", "/proc/fs/ext4", "/proc/fs/jbd2", "/proc/diskstats", "/proc/partitions",
		"/sys/class/bdi", "/sys/devices/virtual/bdi",
		// The host's kernel command line (a VM agent's flags and ports) and
		// build configuration.
		"/proc/cmdline", "/proc/config.gz",
	}
	readonlyPaths = []string{
		"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
	}
)

// setupSystem configures the new namespaces from inside: hostname,
// loopback, namespaced sysctls, then masks /proc.
func setupSystem(cfg *initConfig) error {
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		return fmt.Errorf("sethostname: %w", err)
	}
	if err := loopbackUp(); err != nil {
		return err
	}
	// ICMP datagram sockets for every user, so ping works without
	// CAP_NET_RAW. The range must be of gids mapped in the sandbox's user
	// namespace, or the kernel refuses it.
	if err := os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte(fmt.Sprintf("0 %d", uidRange-1)), 0); err != nil {
		return fmt.Errorf("ping_group_range: %w", err)
	}
	if err := limitICMP(); err != nil {
		return err
	}
	if err := ownBootID(); err != nil {
		return err
	}

	return maskProc("")
}

// maskProc masks the kernel files of the /proc (and /sys) under root
// ("" for the sandbox's own): maskedPaths hidden, readonlyPaths read-only.
// An image root's /proc (completeImages) gets the same; it has no /sys.
func maskProc(root string) error {
	for _, p := range maskedPaths {
		if root != "" && !strings.HasPrefix(p, "/proc/") {
			continue
		}
		p = root + p
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		if fi.IsDir() {
			err = unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0")
		} else {
			err = unix.Mount("/dev/null", p, "", unix.MS_BIND, "")
		}
		if err != nil {
			return fmt.Errorf("mask %s: %w", p, err)
		}
	}
	for _, p := range readonlyPaths {
		p = root + p
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s: %w", p, err)
		}
		// A remount must keep the flags the kernel locked on the mount.
		var st unix.Statfs_t
		if err := unix.Statfs(p, &st); err != nil {
			return err
		}
		flags := uintptr(unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY) | lockedFlags(st.Flags)
		if err := unix.Mount(p, p, "", flags, ""); err != nil {
			return fmt.Errorf("make %s read-only: %w", p, err)
		}
	}
	return nil
}

// MaxPtys bounds the pseudo-terminals one sandbox may have open at once.
const MaxPtys = 256

// ownBootID gives the sandbox a boot id of its own: the host's would tell
// code in two sandboxes that they share a host.
func ownBootID() error {
	const p = "/proc/sys/kernel/random/boot_id"
	if _, err := os.Stat(p); err != nil {
		return nil
	}
	// A file on /dev's tmpfs, bound over the host's and then unlinked: the
	// mount keeps it, and no path to it remains.
	src := "/dev/.boot_id"
	if err := os.WriteFile(src, []byte(newUUID()+"\n"), 0o444); err != nil {
		return fmt.Errorf("boot id: %w", err)
	}
	defer os.Remove(src)
	if err := unix.Mount(src, p, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("boot id: %w", err)
	}
	if err := unix.Mount("", p, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("boot id: %w", err)
	}
	return nil
}

// newUUID returns a random (version 4) UUID in its text form.
func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func lockedFlags(statfsFlags int64) uintptr {
	var f uintptr
	for _, m := range []struct{ st, ms uintptr }{
		{unix.ST_NOSUID, unix.MS_NOSUID}, {unix.ST_NODEV, unix.MS_NODEV},
		{unix.ST_NOEXEC, unix.MS_NOEXEC}, {unix.ST_NOATIME, unix.MS_NOATIME},
		{unix.ST_NODIRATIME, unix.MS_NODIRATIME}, {unix.ST_RELATIME, unix.MS_RELATIME},
	} {
		if uintptr(statfsFlags)&m.st != 0 {
			f |= m.ms
		}
	}
	return f
}

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	return nil
}

// fileMax is the value EnsureFileMax gives fs.file-max: the largest the
// kernel takes (LONG_MAX), as systemd sets it at boot.
const fileMax = math.MaxInt64

// EnsureFileMax raises the host's fs.file-max to fileMax. The kernel counts
// open files host-wide against it, while each file is also charged to its
// opener's memory cgroup: a sandbox within its memory limit could hold
// most of a finite table (a 512 MiB sandbox held 2.0 million files, 81 % of
// the default 2.4 million, and its neighbours' processes then failed with
// ENFILE). Lifted, the memory limit alone bounds each sandbox. It reports
// the old and new values, equal when nothing changed.
func EnsureFileMax() (old, now int64, err error) {
	return raiseSysctl("/proc/sys/fs/file-max", "fs.file-max", fileMax)
}

// pidMax is the value EnsurePidMax gives kernel.pid_max: the kernel's
// largest on 64-bit (PID_MAX_LIMIT), systemd's default since v243.
const pidMax = 4194304

// EnsurePidMax raises the host's kernel.pid_max to pidMax. Every task of
// every sandbox takes a host pid, within its own pids limit, and many
// sandboxes of one key together fill the kernel's default 32,768 long
// before any limit of theirs (100 × 512, review 27 N1; a gvisor sandbox's
// Sentry and stubs are host tasks too), when the server, sshd and every
// neighbour fail to fork. Lifted, each sandbox's limit is what binds.
func EnsurePidMax() (old, now int64, err error) {
	return raiseSysctl("/proc/sys/kernel/pid_max", "kernel.pid_max", pidMax)
}

// raiseSysctl raises the integer sysctl at path to at least want; it
// reports the old and new values, equal when nothing changed.
func raiseSysctl(path, name string, want int64) (old, now int64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", name, err)
	}
	if old, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", name, err)
	}
	if old >= want {
		return old, old, nil
	}
	if err := os.WriteFile(path, []byte(strconv.FormatInt(want, 10)), 0); err != nil {
		return old, old, fmt.Errorf("raise %s: %w", name, err)
	}
	return old, want, nil
}

// EnsurePtyPool raises the host's kernel.pty.max, when it is lower, so
// that sandboxes can each hold MaxPtys terminals besides the
// ones the host keeps for itself (kernel.pty.reserve): the pool is shared
// by every devpts instance. It reports the old and new values, equal when
// nothing changed.
func EnsurePtyPool(sandboxes int) (old, now int, err error) {
	read := func(name string) (int, error) {
		b, err := os.ReadFile("/proc/sys/kernel/pty/" + name)
		if err != nil {
			return 0, err
		}
		return strconv.Atoi(strings.TrimSpace(string(b)))
	}
	if old, err = read("max"); err != nil {
		return 0, 0, fmt.Errorf("kernel.pty.max: %w", err)
	}
	reserve, err := read("reserve")
	if err != nil {
		return old, old, fmt.Errorf("kernel.pty.reserve: %w", err)
	}
	// The kernel's ceiling (NR_UNIX98_PTY_MAX).
	want := min(reserve+sandboxes*MaxPtys, 1<<20)
	if old >= want {
		return old, old, nil
	}
	if err := os.WriteFile("/proc/sys/kernel/pty/max", []byte(strconv.Itoa(want)), 0); err != nil {
		return old, old, fmt.Errorf("raise kernel.pty.max: %w", err)
	}
	return old, want, nil
}
