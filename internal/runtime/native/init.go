package native

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	goruntime "runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

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
	// fdExtra and up: the first process's ExtraFiles; their count is in
	// the environment variable envExtraFiles.
	fdExtra = 8
)

const envExtraFiles = "HUTCH_INIT_EXTRA_FILES"

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
	// Anything above them was leaked to us by whoever ran hutch: close it
	// outright so not even the init holds it.
	extra, _ := strconv.Atoi(os.Getenv(envExtraFiles))
	if err := unix.CloseRange(uint(fdExtra+extra), ^uint(0), 0); err != nil {
		os.Exit(1)
	}
	reserveThreads()
	// Catching every signal costs a few ms (Go starts a signal thread); do it
	// while the set-up below waits on the parent.
	sigs := make(chan os.Signal, 64)
	notified := make(chan struct{})
	go func() {
		signal.Notify(sigs)
		close(notified)
	}()
	// Executed as /proc/self/fd/N, the kernel would name us "N" in ps.
	name := []byte(initArg0 + "\x00")
	unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&name[0])), 0, 0, 0)
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
	want := cfg.Layers
	if cfg.Disk {
		want++
	}
	want += len(cfg.Mounts)
	for _, img := range cfg.Images {
		want += img.Layers
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
	if err := completeImages(&cfg); err != nil {
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

	extra, _ := strconv.Atoi(os.Getenv(envExtraFiles))
	proc.extra = extra
	var (
		outR     *os.File
		copyDone chan struct{}
		stopCopy = make(chan struct{})
	)
	if cfg.Log {
		// The process writes to a pipe; the init keeps what comes out in
		// the output files (descriptors 5 and 6), which it alone holds.
		r, w, err := os.Pipe()
		if err != nil {
			return 0, fmt.Errorf("output pipe: %w", err)
		}
		outR, proc.output = r, w
	}
	pid, console, err := proc.start()
	if proc.output != nil {
		proc.output.Close()
	}
	if err != nil {
		return 0, err
	}
	if outR != nil {
		ring := &outputRing{files: [2]*os.File{os.NewFile(fdStdout, outputLog), os.NewFile(fdStderr, outputLogOld)}, half: outputHalf}
		copyDone = make(chan struct{})
		go func() {
			copyOutput(outR, ring, stopCopy)
			close(copyDone)
		}()
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
	unix.Close(fdStdin)
	if outR == nil {
		unix.Close(fdStdout)
		unix.Close(fdStderr)
	}
	for i := 0; i < extra; i++ {
		unix.Close(fdExtra + i)
	}

	st := supervise(pid, sigs, &sockGuard{budget: cfg.SocketBudget, proc: "/proc", self: os.Getpid()})
	if copyDone != nil {
		close(stopCopy)
		<-copyDone
	}
	exitFile := os.NewFile(fdExit, "exit.json")
	if b, err := json.Marshal(st); err == nil {
		exitFile.Write(b)
	}
	exitFile.Close()
	sendMsg(sock, initMsg{Type: msgExited, Exit: &st})
	return st.Code, nil
}

// spareThreads is how many idle threads the init keeps for Go's runtime.
const spareThreads = 3

// reserveThreads runs the init's Go runtime on one P and makes it start
// spareThreads threads now, which it keeps idle for later. The runtime
// starts a thread when it needs one and has none idle (to run a timer's
// goroutine, to replace one blocked in a syscall), and dies when it cannot
// ("failed to create new OS thread"): inside a fork bomb that holds every
// pid of the sandbox it cannot, and the sandbox would die with its init.
// One P keeps the need small (no thread spins up for a second P); the
// spares meet it. Each spare counts against the sandbox's tasks.
func reserveThreads() {
	goruntime.GOMAXPROCS(1)
	var locked, release, done sync.WaitGroup
	locked.Add(spareThreads)
	done.Add(spareThreads)
	release.Add(1)
	for range spareThreads {
		go func() {
			defer done.Done()
			// Locked goroutines waiting at once each hold a thread of
			// their own; unlocked, the threads stay with the runtime.
			goruntime.LockOSThread()
			locked.Done()
			release.Wait()
			goruntime.UnlockOSThread()
		}()
	}
	locked.Wait()
	release.Done()
	done.Wait()
}

// supervise reaps every child until the first process exits, forwarding
// signals to it and keeping guard's watch meanwhile, and reports how it
// ended. It all runs on the init's locked main thread: a goroutine of its
// own making syscalls could make Go's runtime start a thread while a fork
// bomb holds every pid the sandbox may have, and the runtime dies when it
// cannot ("failed to create new OS thread"), taking the sandbox with it.
func supervise(pid int, sigs <-chan os.Signal, guard *sockGuard) runtime.ExitStatus {
	var tick <-chan time.Time
	if guard.budget > 0 {
		t := time.NewTicker(sockGuardInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		var sig os.Signal
		select {
		case <-tick:
			guard.check()
			continue
		case s, ok := <-sigs:
			if !ok {
				return runtime.ExitStatus{Code: 255, Error: "init lost its signal channel"}
			}
			sig = s
		}
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
}
