package native

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/runtime"
)

// initArg0 is argv[0] of a sandbox's init; IsInit looks for it.
const initArg0 = "hutch-init"

// The init's file descriptors, as the parent lays them out (see Create).
const (
	fdSync   = 3
	fdStdin  = 4
	fdStdout = 5
	fdStderr = 6
	fdExit   = 7
)

// IsInit reports whether this process is a sandbox's init. main calls it
// first and hands over to Init when it is true.
func IsInit() bool { return len(os.Args) > 0 && os.Args[0] == initArg0 }

func init() {
	if IsInit() {
		// Keep the main goroutine on the main thread: thread-scoped state set
		// up for the sandbox's processes (capability bounding set, cgroup
		// namespace) lives there, and every fork happens from it.
		goruntime.LockOSThread()
	}
}

// Init is the body of a sandbox's PID 1. It should not be called directly:
// Runtime.Create starts it with the file descriptors it expects. It never
// returns.
func Init() {
	// The descriptors the parent passed are not close-on-exec, and Go's
	// ForkExec closes nothing that is not: mark every inherited descriptor
	// so none of them (the sync socket, the exit file on the host) can ever
	// reach a sandbox process (the CVE-2024-21626 class).
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		os.Exit(1)
	}
	// Catching every signal costs a few ms (Go starts a signal thread); do it
	// while the set-up below waits on the parent.
	sigs := make(chan os.Signal, 64)
	notified := make(chan struct{})
	go func() {
		signal.Notify(sigs)
		close(notified)
	}()
	sock := os.NewFile(fdSync, "sync")
	code, err := runInit(sock, sigs, notified)
	if err != nil {
		class := "internal"
		switch {
		case errors.Is(err, errdefs.ErrInvalidArgument):
			class = "invalid"
		case errors.Is(err, errdefs.ErrNotFound):
			class = "notfound"
		}
		sendMsg(sock, initMsg{Type: msgError, Error: err.Error(), Class: class})
		os.Exit(1)
	}
	os.Exit(code)
}

func runInit(sock *os.File, sigs <-chan os.Signal, notified <-chan struct{}) (int, error) {
	var cfg initConfig
	fds, err := recvMsg(sock, &cfg)
	if err != nil {
		return 0, fmt.Errorf("read config: %w", err)
	}
	want := 1
	if cfg.Disk {
		want = 2
	}
	if len(fds) != want {
		return 0, fmt.Errorf("expected %d mounts, got %d fds", want, len(fds))
	}
	if err := setupRootfs(&cfg, fds); err != nil {
		return 0, err
	}
	if err := setupSystem(&cfg); err != nil {
		return 0, err
	}
	proc, err := prepareProcess(&cfg)
	if err != nil {
		return 0, err
	}
	var joined initMsg
	if _, err := recvMsg(sock, &joined); err != nil || joined.Type != msgJoined {
		return 0, fmt.Errorf("waiting for cgroups: %v", err)
	}
	if err := lockdown(&cfg); err != nil {
		return 0, err
	}
	// Every signal is caught: the kernel then delivers signals sent from
	// inside the sandbox to its init, and Go's default actions (exit, crash)
	// never apply to PID 1.
	<-notified

	pid, console, err := proc.start()
	if err != nil {
		return 0, err
	}
	started := initMsg{Type: msgStarted, Pid: pid}
	if console != nil {
		err = sendMsg(sock, started, int(console.Fd()))
		console.Close()
	} else {
		err = sendMsg(sock, started)
	}
	if err != nil {
		// Nobody is attached any more; the sandbox still runs detached.
		_ = err
	}
	for _, fd := range []int{fdStdin, fdStdout, fdStderr} {
		unix.Close(fd)
	}

	st := supervise(pid, sigs)
	exitFile := os.NewFile(fdExit, "exit.json")
	if b, err := json.Marshal(st); err == nil {
		exitFile.Write(b)
	}
	exitFile.Close()
	sendMsg(sock, initMsg{Type: msgExited, Exit: &st})
	return st.Code, nil
}

// supervise reaps every child until the first process exits, forwarding
// signals to it meanwhile, and reports how it ended.
func supervise(pid int, sigs <-chan os.Signal) runtime.ExitStatus {
	for sig := range sigs {
		s := sig.(syscall.Signal)
		switch s {
		case unix.SIGCHLD:
			for {
				var ws unix.WaitStatus
				wpid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
				if wpid <= 0 || err != nil {
					break
				}
				if wpid == pid {
					if ws.Signaled() {
						return runtime.ExitStatus{Code: 128 + int(ws.Signal()), Signal: ws.Signal()}
					}
					return runtime.ExitStatus{Code: ws.ExitStatus()}
				}
			}
		case unix.SIGSEGV, unix.SIGBUS, unix.SIGFPE, unix.SIGILL, unix.SIGTRAP, unix.SIGSYS, unix.SIGPIPE, unix.SIGURG, unix.SIGTTIN, unix.SIGTTOU, unix.SIGTSTP:
			// Faults sent with kill(2), and job-control noise: not for forwarding.
		default:
			unix.Kill(pid, s)
		}
	}
	return runtime.ExitStatus{Code: 255, Error: "init lost its signal channel"}
}

// setupRootfs builds the sandbox's root in its own mount namespace and
// enters it: overlay(idmapped template, private upper), a fresh /proc and
// /sys, a minimal /dev; then pivot_root and detach everything of the host.
func setupRootfs(cfg *initConfig, mountFds []int) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	lower := filepath.Join(cfg.Dir, "lower")
	root := filepath.Join(cfg.Dir, "rootfs")
	if err := unix.MoveMount(mountFds[0], "", unix.AT_FDCWD, lower, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach template: %w", err)
	}
	layer := cfg.Dir
	if cfg.Disk {
		// The writable layer lives on the sandbox's own file system.
		layer = filepath.Join(cfg.Dir, "disk")
		if err := unix.MoveMount(mountFds[1], "", unix.AT_FDCWD, layer, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("attach disk layer: %w", err)
		}
		for _, d := range []string{"upper", "work"} {
			if err := os.Mkdir(filepath.Join(layer, d), 0o755); err != nil {
				return fmt.Errorf("disk layer: %w", err)
			}
		}
	}
	for _, fd := range mountFds {
		unix.Close(fd)
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,userxattr,volatile", lower, filepath.Join(layer, "upper"), filepath.Join(layer, "work"))
	if err := unix.Mount("overlay", root, "overlay", 0, opts); err != nil {
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
		{"devpts", "dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620,gid=5"},
		{"tmpfs", "dev/shm", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777,size=65536k"},
		{"mqueue", "dev/mqueue", "mqueue", noexec, ""},
	}
	for _, m := range mounts {
		target := filepath.Join(root, m.target)
		if err := os.MkdirAll(target, 0o755); err != nil {
			return fmt.Errorf("mkdir %s: %w", m.target, err)
		}
		if err := unix.Mount(m.src, target, m.fstype, m.flags, m.data); err != nil {
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

// writeEtc writes the per-sandbox files of /etc into the private layer.
func writeEtc(root, hostname string) error {
	files := map[string]string{
		"etc/hostname":    hostname + "\n",
		"etc/hosts":       "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t" + hostname + "\n",
		"etc/resolv.conf": "",
	}
	for name, content := range files {
		p := filepath.Join(root, name)
		// Replace, never write through: a template symlink must not redirect us.
		os.Remove(p)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return fmt.Errorf("write /%s: %w", name, err)
		}
	}
	return nil
}

// maskedPaths hide kernel information a sandbox has no business reading
// (Docker's list); readonlyPaths stop writes to kernel knobs.
var (
	maskedPaths = []string{
		"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys",
		"/proc/latency_stats", "/proc/sched_debug", "/proc/scsi", "/proc/timer_list",
		"/proc/timer_stats", "/sys/firmware", "/sys/devices/virtual/powercap",
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
	// Unprivileged ICMP sockets, so ping works without CAP_NET_RAW.
	os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte("0 2147483647"), 0)

	for _, p := range maskedPaths {
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

// keptCaps is the bounding set of sandbox processes: Docker's default set
// less NET_RAW (ping works through ICMP sockets instead). These are
// capabilities inside the sandbox's user namespace only.
var keptCaps = map[int]bool{
	unix.CAP_CHOWN: true, unix.CAP_DAC_OVERRIDE: true, unix.CAP_FSETID: true,
	unix.CAP_FOWNER: true, unix.CAP_MKNOD: true, unix.CAP_SETGID: true,
	unix.CAP_SETUID: true, unix.CAP_SETFCAP: true, unix.CAP_SETPCAP: true,
	unix.CAP_NET_BIND_SERVICE: true, unix.CAP_SYS_CHROOT: true, unix.CAP_KILL: true,
	unix.CAP_AUDIT_WRITE: true,
}

// lockdown applies the limits that every sandbox process inherits from the
// init: rlimits, a cgroup namespace, the capability bounding set,
// no_new_privs, non-dumpability and the seccomp filter (last, since it
// forbids the calls made before it).
func lockdown(cfg *initConfig) error {
	// Open files: as many as the host allows (hosts without CAP_SYS_RESOURCE
	// cannot raise a hard limit). syscall.Setrlimit tells Go's runtime too.
	var nofile syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile); err == nil {
		nofile.Cur = min(nofile.Max, 1<<20)
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &nofile)
	}
	// Thread-scoped from here: this is the locked main thread (see init).
	// The cgroup namespace is rooted at the sandbox's cgroup, which the
	// parent moved us into before sending the config.
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return fmt.Errorf("cgroup namespace: %w", err)
	}
	last := lastCap()
	for c := 0; c <= last; c++ {
		if !keptCaps[c] {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
				return fmt.Errorf("drop capability %d: %w", c, err)
			}
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	// Nothing in the sandbox may ptrace the init or open its /proc files.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("set non-dumpable: %w", err)
	}
	return loadSeccomp(cfg.NoNewPrivileges)
}

func lastCap() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return unix.CAP_LAST_CAP
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return unix.CAP_LAST_CAP
	}
	return n
}

// process is the first process, resolved and ready to start.
type process struct {
	path     string
	args     []string
	env      []string
	dir      string
	user     *execUser
	terminal bool
	size     *pty.Winsize
}

func prepareProcess(cfg *initConfig) (*process, error) {
	spec := cfg.User
	if spec == "" {
		spec = cfg.DefaultUser
	}
	if spec == "" {
		spec = "root"
	}
	u, err := lookupUser("", spec)
	if err != nil {
		return nil, err
	}
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + u.Home, "USER=" + u.Name, "LOGNAME=" + u.Name, "SHELL=" + u.Shell,
		"HOSTNAME=" + cfg.Hostname, "LANG=C.UTF-8",
	}
	if cfg.Terminal {
		env = append(env, "TERM=xterm-256color")
	}
	env = mergeEnv(env, cfg.Env)
	dir := cfg.Cwd
	if dir == "" {
		dir = u.Home
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			dir = "/"
		}
	} else if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("working directory %s does not exist in the sandbox: %w", dir, errdefs.ErrInvalidArgument)
	}
	path, err := lookPath(cfg.Args[0], envValue(env, "PATH"))
	if err != nil {
		return nil, err
	}
	p := &process{path: path, args: cfg.Args, env: env, dir: dir, user: u, terminal: cfg.Terminal}
	if cfg.Terminal {
		p.size = &pty.Winsize{Rows: cfg.Rows, Cols: cfg.Cols}
		if p.size.Rows == 0 || p.size.Cols == 0 {
			p.size = &pty.Winsize{Rows: 24, Cols: 80}
		}
	}
	return p, nil
}

// start forks and execs the process from the locked main thread. With a
// terminal, it runs on a pty made in the sandbox's own devpts, whose
// master is returned for the parent.
func (p *process) start() (int, *os.File, error) {
	attr := &syscall.ProcAttr{
		Dir: p.dir,
		Env: p.env,
		Sys: &syscall.SysProcAttr{
			Credential: &syscall.Credential{Uid: p.user.UID, Gid: p.user.GID, Groups: p.user.Groups},
			// A session of its own: no controlling terminal unless its own pty.
			Setsid: true,
		},
	}
	var console *os.File
	if p.terminal {
		master, slave, err := pty.Open()
		if err != nil {
			return 0, nil, fmt.Errorf("open pty: %w", err)
		}
		defer slave.Close()
		if err := pty.Setsize(master, p.size); err != nil {
			return 0, nil, fmt.Errorf("pty size: %w", err)
		}
		if err := os.Chown(slave.Name(), int(p.user.UID), -1); err != nil {
			return 0, nil, fmt.Errorf("pty owner: %w", err)
		}
		attr.Files = []uintptr{slave.Fd(), slave.Fd(), slave.Fd()}
		attr.Sys.Setctty = true
		attr.Sys.Ctty = 0
		console = master
	} else {
		attr.Files = []uintptr{fdStdin, fdStdout, fdStderr}
	}
	pid, err := syscall.ForkExec(p.path, p.args, attr)
	if err != nil {
		if console != nil {
			console.Close()
		}
		return 0, nil, fmt.Errorf("exec %s: %w", p.args[0], err)
	}
	return pid, console, nil
}

// lookPath finds file in path as a shell would, inside the sandbox.
func lookPath(file, path string) (string, error) {
	check := func(p string) error {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if fi.IsDir() || fi.Mode()&0o111 == 0 {
			return syscall.EACCES
		}
		return nil
	}
	if strings.Contains(file, "/") {
		if err := check(file); err != nil {
			return "", notFound(file, err)
		}
		return file, nil
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, file)
		if check(p) == nil {
			return p, nil
		}
	}
	return "", &initError{msg: fmt.Sprintf("exec: %q: executable file not found in $PATH", file), class: errdefs.ErrNotFound}
}

func notFound(file string, err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return &initError{msg: fmt.Sprintf("exec: %q: no such file or directory", file), class: errdefs.ErrNotFound}
	}
	return &initError{msg: fmt.Sprintf("exec: %q: %v", file, err), class: errdefs.ErrInvalidArgument}
}

func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, _ := strings.Cut(env[i], "="); k == key {
			return v
		}
	}
	return ""
}

// mergeEnv returns base with each KEY=VALUE of extra added or replacing.
func mergeEnv(base, extra []string) []string {
	out := append([]string(nil), base...)
	for _, e := range extra {
		k, _, _ := strings.Cut(e, "=")
		replaced := false
		for i, b := range out {
			if bk, _, _ := strings.Cut(b, "="); bk == k {
				out[i], replaced = e, true
				break
			}
		}
		if !replaced {
			out = append(out, e)
		}
	}
	return out
}
