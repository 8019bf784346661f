package gvisor

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// IsGuestInit reports whether this process is a gVisor sandbox's PID 1
// (the sandbox binary as runsc starts it); main hands over to GuestInit.
func IsGuestInit() bool { return os.Getpid() == 1 && os.Getenv(envGuestInit) != "" }

// GuestInit is PID 1 inside a gVisor sandbox: it starts the first process
// (os.Args[1:], already resolved by the host: runsc set the user, the
// working directory and the environment), forwards signals to it, reaps
// every orphan, and exits as the first process did — 128+n for a signal
// n, as a shell reports it. Nothing else needs doing inside: the sentry
// made the root, the mounts and the limits; only a sandbox with image
// roots has PID 1 complete them first, as root, and exec itself again as
// the first process's user (showImages), exiting 125 if that fails. It
// never returns.
func GuestInit() {
	if v, ok := os.LookupEnv(envGuestImages); ok {
		err := showImages(v)
		fmt.Fprintf(os.Stderr, "hutch: image roots: %v\n", err)
		os.Exit(125)
	}
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, envGuestInit+"=") {
			env = append(env, e)
		}
	}
	sigs := make(chan os.Signal, 32)
	signal.Notify(sigs)
	attr := &syscall.ProcAttr{Env: env, Files: []uintptr{0, 1, 2}}
	if _, err := unix.IoctlGetTermios(0, unix.TCGETS); err == nil {
		// On a console (PID 1's, which runsc made its controlling
		// terminal): the first process is its foreground process group,
		// as a shell's job is.
		attr.Sys = &syscall.SysProcAttr{Setpgid: true, Foreground: true, Ctty: 0}
	}
	pid, err := syscall.ForkExec(os.Args[1], os.Args[1:], attr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "hutch: exec %s: %v\n", os.Args[1], err)
		os.Exit(127)
	}
	// Our stdin is the sandbox's end of the link when the first process
	// serves it (envd): only envd keeps a copy. Not dumpable either: the
	// sandbox's root runs as our uid and could otherwise ptrace us or
	// take our descriptors through /proc.
	if devNull, err := os.Open(os.DevNull); err == nil {
		unix.Dup2(int(devNull.Fd()), 0)
		devNull.Close()
	}
	unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			syscall.Kill(pid, sig.(syscall.Signal))
			continue
		}
		for {
			var ws syscall.WaitStatus
			p, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if p <= 0 || err != nil {
				break
			}
			if p != pid {
				continue
			}
			if ws.Signaled() {
				os.Exit(128 + int(ws.Signal()))
			}
			os.Exit(ws.ExitStatus())
		}
	}
}
