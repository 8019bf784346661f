package gvisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"log/slog"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/runtime/gvisor/link"
	"github.com/hutch-sandbox/hutch/internal/runtime/native"
)

// Each sandbox has a shim: a small host process of its own (containerd's
// shim is the model) that outlives whoever created the sandbox. It
//
//   - lives in the sandbox's network namespace, made for it, where runsc
//     runs with --network=host: the sandbox's sockets are the host
//     kernel's, in that namespace only, so the host's network manager
//     attaches a link to it after the start (gVisor's own netstack reads
//     its interfaces once, at boot) and checkpoints keep listening
//     sockets;
//   - runs `runsc run` (or `runsc restore`) in the foreground with the
//     first process's stdio, and writes exit.json when it ends;
//   - when the first process serves extra files (envd's control and API
//     sockets), holds the host's end of the link on its stdin and serves
//     the host's listening sockets through it (package link): a
//     checkpoint carries the sandbox's end, so only a connection from a
//     host process can be rewired by `runsc restore` — a donated
//     listening socket does not work inside runsc at all.
//
// The shim's descriptors, as startShim lays them out:
const (
	shimSync   = 3 // write end of a pipe: one JSON shimReport, then EOF
	shimStdin  = 4
	shimStdout = 5
	shimStderr = 6
	shimExtra  = 7 // and up: the listening sockets served over the link
)

// shimArg0 is argv[0] of a shim; IsShim looks for it.
const shimArg0 = "hutch-gvisor-shim"

// usernsArg0 is argv[0] of a process held only for its user namespace
// (see newUserns).
const usernsArg0 = "hutch-gvisor-userns"

// shimConfig is shim.json.
type shimConfig struct {
	ID         string   `json:"id"`
	Runsc      string   `json:"runsc"`
	Flags      []string `json:"flags"` // runsc's global flags
	Checkpoint string   `json:"checkpoint,omitempty"`
	Console    string   `json:"console,omitempty"` // --console-socket
	Channels   int      `json:"channels"`
	// Log has the shim keep the first process's output, through a pipe,
	// in the sandbox's two output files (native.CopyOutput).
	Log bool `json:"log,omitempty"`
	// Cgroup is the sandbox's cgroups path: the shim confines itself
	// beside it (confineShim).
	Cgroup string `json:"cgroup"`
}

// shimReport is what a shim tells its creator once: the sandbox runs, or
// why not.
type shimReport struct {
	Error string `json:"error,omitempty"`
}

// runscFlags are runsc's global flags for every command on a sandbox.
func (rt *Runtime) runscFlags(dir string) []string {
	return []string{
		// --allow-suid: setuid programs (sudo) work as on the native
		// runtime, unless Spec.NoNewPrivileges; root inside is the
		// Sentry's, never the host's.
		"--root=" + rt.runscRoot(), "--platform=" + rt.platform, "--network=host", "--allow-suid",
		"--overlay2=root:dir=" + filepath.Join(dir, "upper"),
		"--log=" + filepath.Join(dir, "runsc.log"),
	}
}

// runsc runs one runsc command on the sandbox in dir and returns its
// output, its error naming the command and quoting what runsc said.
func (rt *Runtime) runscCmd(ctx context.Context, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, rt.runsc, append(rt.runscFlags(dir), args...)...)
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			msg = strings.TrimSpace(string(ee.Stderr))
		}
		return out, fmt.Errorf("runsc %s: %v: %s", args[0], err, msg)
	}
	return out, nil
}

// startShim starts the sandbox's shim and waits for its report.
func (rt *Runtime) startShim(ctx context.Context, dir string, rec *record, p *runtime.Process, checkpoint string, undo *cleanup) (_ *sandbox, retErr error) {
	cfg := shimConfig{ID: rec.ID, Runsc: rt.runsc, Flags: rt.runscFlags(dir), Checkpoint: checkpoint, Channels: rec.Channels}
	cfg.Cgroup = rt.cgroupsPath(rec.ID)
	if d := rec.Resources.DiskBytes; d > 0 {
		// The overlay's own size: df inside shows the limit, and writes
		// past it fail with ENOSPC before the disk image under upper/
		// (which bounds the host's disk) fills.
		for i, f := range cfg.Flags {
			if strings.HasPrefix(f, "--overlay2=") {
				cfg.Flags[i] = f + ",size=" + strconv.FormatInt(d, 10)
			}
		}
	}
	devNull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer devNull.Close()
	logf, err := os.OpenFile(filepath.Join(dir, "shim.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	sio, err := newStdio(p, dir, checkpoint != "")
	if err != nil {
		return nil, err
	}
	cfg.Log = sio.log
	defer sio.closeChildEnds()
	undo.add(sio.closeParentEnds)
	var console net.Listener
	if p.Terminal {
		cfg.Console = filepath.Join(dir, "console.sock")
		if console, err = net.Listen("unix", cfg.Console); err != nil {
			return nil, fmt.Errorf("console socket: %w", err)
		}
		defer console.Close()
	}
	if err := writeJSON(filepath.Join(dir, "shim.json"), cfg); err != nil {
		return nil, err
	}
	syncR, syncW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer syncR.Close()
	files := []uintptr{devNull.Fd(), logf.Fd(), logf.Fd(), syncW.Fd(), sio.childIn.Fd(), sio.childOut.Fd(), sio.childErr.Fd()}
	for _, f := range p.ExtraFiles {
		files = append(files, f.Fd())
	}
	attr := &syscall.ProcAttr{
		Env:   []string{"GOMAXPROCS=1", "GOGC=50"},
		Files: files,
		Sys: &syscall.SysProcAttr{
			// Its own network namespace, which runsc and the sandbox share;
			// its own session: it outlives its creator.
			Cloneflags: syscall.CLONE_NEWNET,
			Setsid:     true,
		},
	}
	pid, err := syscall.ForkExec(rt.binary, []string{shimArg0, filepath.Join(dir, "shim.json")}, attr)
	syncW.Close()
	sio.closeChildEnds()
	if err != nil {
		return nil, fmt.Errorf("start the sandbox's shim: %w", err)
	}
	undo.add(func() {
		rt.runscCmd(context.Background(), dir, "delete", "--force", rec.ID)
		unix.Kill(pid, unix.SIGKILL)
		var ws unix.WaitStatus
		unix.Wait4(pid, &ws, 0, nil)
		rt.removeCgroups(rec.ID)
	})
	go func() {
		// The shim is our child until it exits: collect it so it leaves no
		// zombie. Other processes find it by its pidfd.
		var ws unix.WaitStatus
		unix.Wait4(pid, &ws, 0, nil)
	}()
	rec.ShimPid = pid
	if rec.ShimStart, err = native.ProcessStartTime(pid); err != nil {
		return nil, fmt.Errorf("sandbox shim: %w", err)
	}
	if err := rt.writeRecord(rec); err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { unix.Kill(pid, unix.SIGKILL) })
	defer stop()
	s := &sandbox{rt: rt, id: rec.ID, dir: dir, sio: sio, rec: rec}
	if console != nil {
		type got struct {
			f   *os.File
			err error
		}
		ch := make(chan got, 1)
		go func() {
			f, err := receiveConsole(console)
			ch <- got{f, err}
		}()
		// The report comes after the console was sent (runsc sends it
		// before it starts the process), or instead of it.
		select {
		case g := <-ch:
			if g.err != nil {
				return nil, fmt.Errorf("sandbox console: %w", g.err)
			}
			s.console = g.f
			undo.add(func() { g.f.Close() })
			if err := unix.IoctlSetWinsize(int(g.f.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: p.ConsoleSize.Rows, Col: p.ConsoleSize.Cols}); err != nil && p.ConsoleSize.Rows > 0 {
				return nil, fmt.Errorf("sandbox console size: %w", err)
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-shimGone(syncR):
			// Fall through to the report, which says why.
		}
	}
	var rep shimReport
	b, err := io.ReadAll(syncR)
	if err != nil || len(b) == 0 {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("the sandbox's shim died before it reported: %v %s", err, tail(filepath.Join(dir, "shim.log")))
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("sandbox shim report %q: %w", b, err)
	}
	if rep.Error != "" {
		return nil, fmt.Errorf("start sandbox: %s", rep.Error)
	}
	if !stop() {
		return nil, ctx.Err()
	}
	if s.console != nil {
		sio.attachConsole(s.console, p)
	}
	sio.start()
	return s, nil
}

// shimGone is closed when the sync pipe has something to read or ends.
func shimGone(r *os.File) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		fds := []unix.PollFd{{Fd: int32(r.Fd()), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err != unix.EINTR {
				break
			}
		}
		close(ch)
	}()
	return ch
}

// receiveConsole accepts runsc's connection on the console socket and
// takes the pty master it sends.
func receiveConsole(ln net.Listener) (*os.File, error) {
	c, err := ln.Accept()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	uc := c.(*net.UnixConn)
	buf := make([]byte, 64)
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, fmt.Errorf("no pty received: %v", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return nil, fmt.Errorf("no pty received: %v", err)
	}
	return os.NewFile(uintptr(fds[0]), "console"), nil
}

// tail is the end of a log file, for an error message.
func tail(p string) string {
	b, _ := os.ReadFile(p)
	s := strings.TrimSpace(string(b))
	if len(s) > 800 {
		s = "..." + s[len(s)-800:]
	}
	return s
}

// IsShim reports whether this process is a sandbox's shim or one of the
// backend's other helper processes; main calls it first and hands over
// to Main when it is true.
func IsShim() bool {
	return len(os.Args) > 0 && (os.Args[0] == shimArg0 || os.Args[0] == usernsArg0)
}

// Main is the body of a shim or helper process (IsShim). It never returns.
func Main() {
	switch os.Args[0] {
	case usernsArg0:
		// Held until the creator closes our stdin: our user namespace
		// is what its idmapped mounts map into.
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	case shimArg0:
		os.Exit(shimMain())
	}
	os.Exit(2)
}

func shimMain() int {
	// Inherited descriptors are not close-on-exec: runsc must get only
	// what it is given (the sync pipe held open by runsc would never end).
	unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	sync := os.NewFile(shimSync, "sync")
	report := func(err error) {
		if sync == nil {
			return
		}
		var rep shimReport
		if err != nil {
			rep.Error = err.Error()
		}
		b, _ := json.Marshal(rep)
		sync.Write(b)
		sync.Close()
		sync = nil
	}
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "hutch-gvisor-shim:", err)
		report(err)
		return 1
	}
	if len(os.Args) != 2 {
		return fail(errors.New("usage: hutch-gvisor-shim <shim.json>"))
	}
	var cfg shimConfig
	b, err := os.ReadFile(os.Args[1])
	if err != nil {
		return fail(err)
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fail(err)
	}
	dir := filepath.Dir(os.Args[1])
	if err := confineShim(cfg.Cgroup); err != nil {
		return fail(fmt.Errorf("the shim's memory cgroup: %w", err))
	}
	if lo, err := netlink.LinkByName("lo"); err != nil || netlink.LinkSetUp(lo) != nil {
		return fail(fmt.Errorf("loopback: %v", err))
	}
	args := append([]string(nil), cfg.Flags...)
	pidFile := filepath.Join(dir, "init.pid")
	os.Remove(pidFile)
	if cfg.Checkpoint != "" {
		args = append(args, "restore", "--image-path="+cfg.Checkpoint)
	} else {
		args = append(args, "run")
	}
	args = append(args, "--bundle="+filepath.Join(dir, "bundle"), "--pid-file="+pidFile)
	if cfg.Console != "" {
		args = append(args, "--console-socket="+cfg.Console)
	}
	args = append(args, cfg.ID)
	cmd := exec.Command(cfg.Runsc, args...)
	stdin := os.NewFile(shimStdin, "stdin")
	var host *link.Host
	if cfg.Channels > 0 {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fail(fmt.Errorf("link: %w", err))
		}
		guest := os.NewFile(uintptr(fds[1]), "link-guest")
		hostEnd := os.NewFile(uintptr(fds[0]), "link-host")
		conn, err := net.FileConn(hostEnd)
		hostEnd.Close()
		if err != nil {
			return fail(fmt.Errorf("link: %w", err))
		}
		stdin.Close()
		stdin = guest
		host = link.NewHost(conn, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	}
	cmd.Stdin = stdin
	cmd.Stdout = os.NewFile(shimStdout, "stdout")
	cmd.Stderr = os.NewFile(shimStderr, "stderr")
	var logged chan error
	if cfg.Log {
		r, w, err := os.Pipe()
		if err != nil {
			return fail(fmt.Errorf("output pipe: %w", err))
		}
		cmd.Stdout.(*os.File).Close()
		cmd.Stderr.(*os.File).Close()
		cmd.Stdout, cmd.Stderr = w, w
		logged = make(chan error, 1)
		go func() {
			logged <- native.CopyOutput(dir, 0, r)
			r.Close()
		}()
	}
	if err := cmd.Start(); err != nil {
		return fail(fmt.Errorf("start runsc: %w", err))
	}
	// Only runsc holds the sandbox's ends now: an end of output must be
	// seen by the reader when runsc goes.
	stdin.Close()
	cmd.Stdout.(*os.File).Close()
	if cmd.Stderr != cmd.Stdout {
		cmd.Stderr.(*os.File).Close()
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	if host != nil {
		for i := 0; i < cfg.Channels; i++ {
			ln, err := net.FileListener(os.NewFile(uintptr(shimExtra+i), "listener"))
			if err != nil {
				return fail(fmt.Errorf("listener %d: %w", i, err))
			}
			go host.Serve(ln, byte(i))
		}
	}
	// Ready: the link is up (envd serves), or, without one, runsc wrote
	// the pid file (the first process runs).
	ready := make(chan struct{})
	go func() {
		defer close(ready)
		if host != nil {
			host.Wait(context.Background())
			return
		}
		for {
			// Written, not only made: runsc creates the file before it
			// writes the pid, and a reader in between would find nothing
			// (a test killed pid 0 from an empty one, and hung).
			if b, err := os.ReadFile(pidFile); err == nil && len(strings.TrimSpace(string(b))) > 0 {
				return
			}
			select {
			case <-exited:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	select {
	case <-ready:
		select {
		case <-exited:
			// Gone as soon as ready: a first process that ended at once
			// still ran; only runsc failing before the pid file is an
			// error.
			if _, err := os.Stat(pidFile); err != nil {
				return fail(fmt.Errorf("runsc: %v: %s", waitErr, tail(filepath.Join(dir, "runsc.log"))))
			}
		default:
		}
		report(nil)
	case <-exited:
		if _, err := os.Stat(pidFile); err != nil || host != nil {
			return fail(fmt.Errorf("runsc: %v: %s", waitErr, runscError(filepath.Join(dir, "runsc.log"))))
		}
		report(nil)
	}
	<-exited
	if logged != nil {
		// The output written before the end, up to a short grace: a
		// process it left behind cannot hold the log open for ever.
		select {
		case <-logged:
		case <-time.After(time.Second):
		}
	}
	st := runtime.ExitStatus{}
	var ee *exec.ExitError
	switch {
	case waitErr == nil:
	case errors.As(waitErr, &ee):
		ws := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			st.Signal = ws.Signal()
			st.Code = 128 + int(st.Signal)
		} else {
			st.Code = ws.ExitStatus()
			// GuestInit exits 128+n for a first process killed by signal
			// n, as a shell reports it.
			if st.Code > 128 && st.Code <= 128+64 {
				st.Signal = syscall.Signal(st.Code - 128)
			}
		}
	default:
		st.Code, st.Error = 255, waitErr.Error()
	}
	if err := writeJSON(filepath.Join(dir, "exit.json.tmp"), st); err == nil {
		os.Rename(filepath.Join(dir, "exit.json.tmp"), filepath.Join(dir, "exit.json"))
	}
	if host != nil {
		host.Close()
	}
	return 0
}

// shimMemory is what a shim may use: it holds the link's buffers and a
// few goroutines per connection, a few MiB.
const shimMemory = 128 << 20

// confineShim moves the shim into a memory cgroup of its own beside the
// sandbox's (path + ".shim"), capped at shimMemory: what a guest makes
// its shim hold (streams, buffers of a link it floods) cannot grow on the
// host's account (review 21). Not the sandbox's own cgroup: runsc removes
// that one when the sandbox ends, and waits while anything is left in it.
//
// On a cgroup v1 or hybrid host it also leaves hutch serve's cgroups in the
// trees where a service manager tracks its units (the unified cgroup2
// tree, systemd's named v1 one) for <path>.shim there: runsc's processes,
// its children, are then no part of the service, and a `systemctl stop`
// (KillMode=mixed: SIGKILL to what is left of the unit) does not kill the
// sandbox, as it does not kill native ones (which join every tree).
func confineShim(path string) error {
	pid := []byte(strconv.Itoa(os.Getpid()))
	for _, tracker := range shimTrackers(path) {
		if err := os.MkdirAll(tracker, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(tracker, "cgroup.procs"), pid, 0); err != nil {
			return err
		}
	}
	dir, limit := filepath.Join("/sys/fs/cgroup/memory", path+".shim"), "memory.limit_in_bytes"
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		dir, limit = filepath.Join("/sys/fs/cgroup", path+".shim"), "memory.max" // cgroup v2 only
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, limit), []byte(strconv.Itoa(shimMemory)), 0); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "cgroup.procs"), pid, 0)
}

// shimTrackers are the shim's cgroups, for path, in the trees a service
// manager tracks processes in, on a host with v1 controllers: the unified
// cgroup2 tree and systemd's named one, those that are mounted. On a pure
// cgroup v2 host the memory cgroup is in the one tree, and none.
func shimTrackers(path string) []string {
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		return nil
	}
	var dirs []string
	for _, root := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd"} {
		if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err == nil {
			dirs = append(dirs, filepath.Join(root, path+".shim"))
		}
	}
	return dirs
}

// runscError is the last error line of runsc's log, or its tail.
func runscError(p string) string {
	b, _ := os.ReadFile(p)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], "error") || strings.Contains(lines[i], "Error") {
			return lines[i]
		}
	}
	return tail(p)
}

// userns is a process held in a new user namespace with a sandbox's id
// mapping, for idmapped mounts into it.
type userns struct {
	p     int
	stdin *os.File
}

func newUserns(binary string, hostID, size int) (*userns, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: hostID, Size: size}}
	pid, err := syscall.ForkExec(binary, []string{usernsArg0}, &syscall.ProcAttr{
		Files: []uintptr{r.Fd(), 0, 0},
		Env:   []string{"GOMAXPROCS=1"},
		Sys:   &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, UidMappings: m, GidMappings: m},
	})
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("user namespace for the sandbox: %w", errdefs.Mark(err, errdefs.ErrUnavailable))
	}
	return &userns{p: pid, stdin: w}, nil
}

func (u *userns) pid() int { return u.p }

func (u *userns) close() {
	u.stdin.Close()
	unix.Kill(u.p, unix.SIGKILL)
	var ws unix.WaitStatus
	unix.Wait4(u.p, &ws, 0, nil)
}

// removeCgroups removes what runsc leaves of a sandbox's cgroups when it
// was killed or failed to start. A cgroup whose last processes are still
// exiting cannot be removed yet: it is tried again for a while.
func (rt *Runtime) removeCgroups(id string) {
	rel := strings.TrimPrefix(rt.cgroupsPath(id), "/")
	var dirs []string
	for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		ents, _ := os.ReadDir(root)
		for _, e := range ents {
			dirs = append(dirs, filepath.Join(root, e.Name(), rel))
		}
		dirs = append(dirs, filepath.Join(root, rel))
	}
	if id != "" {
		dirs = append(dirs, filepath.Join("/sys/fs/cgroup/memory", rel+".shim"), filepath.Join("/sys/fs/cgroup", rel+".shim"))
		dirs = append(dirs, shimTrackers(rel)...)
	}
	for try := 0; try < 50; try++ {
		busy := false
		for _, d := range dirs {
			if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) && errors.Is(err, unix.EBUSY) {
				busy = true
			}
		}
		if !busy {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// itoa is strconv.Itoa, for the few places here.
func itoa(n int) string { return strconv.Itoa(n) }
