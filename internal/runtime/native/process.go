package native

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/creack/pty"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// process is the first process, resolved and ready to start.
type process struct {
	path     string
	args     []string
	env      []string
	dir      string
	user     *execUser
	terminal bool
	size     *pty.Winsize
	extra    int // descriptors from fdExtra on go to the process as 3, 4, ...
	// output, when set, is the process's stdout and stderr (the write end
	// of the init's output pipe) instead of descriptors 5 and 6.
	output *os.File
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
		if p.output != nil {
			attr.Files[1], attr.Files[2] = p.output.Fd(), p.output.Fd()
		}
	}
	for i := 0; i < p.extra; i++ {
		attr.Files = append(attr.Files, uintptr(fdExtra+i))
	}
	// The first process, and all it starts, goes before the init when the
	// sandbox runs out of memory: the init is PID 1, and the kernel's OOM
	// killer, choosing by resident memory, would otherwise take it (or
	// envd) for a process whose memory is in socket buffers (review 4).
	// Lowering needs CAP_SYS_RESOURCE in the host's namespace, which the
	// host may not have; raising needs nothing, and a process may come
	// back down to where it was: the child inherits the raised value.
	restore := raiseOOMScore(firstOOMScoreAdj)
	pid, err := syscall.ForkExec(p.path, p.args, attr)
	restore()
	if err != nil {
		if console != nil {
			console.Close()
		}
		return 0, nil, fmt.Errorf("exec %s: %w", p.args[0], err)
	}
	return pid, console, nil
}

// firstOOMScoreAdj is the oom_score_adj of a sandbox's first process:
// envd, which adds as much again for the commands it starts.
const firstOOMScoreAdj = 100

// raiseOOMScore sets this process's oom_score_adj to adj and returns a
// function that sets it back; both do nothing when the file cannot be
// written.
func raiseOOMScore(adj int) (restore func()) {
	const path = "/proc/self/oom_score_adj"
	old, err := os.ReadFile(path)
	if err != nil || os.WriteFile(path, []byte(strconv.Itoa(adj)), 0) != nil {
		return func() {}
	}
	return func() { os.WriteFile(path, old, 0) }
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

// EnvValue is the value of key in env (KEY=VALUE entries), the last
// one's; "" when there is none.
func EnvValue(env []string, key string) string { return envValue(env, key) }

// MergeEnv returns base with each KEY=VALUE of extra added or replacing.
func MergeEnv(base, extra []string) []string { return mergeEnv(base, extra) }

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
