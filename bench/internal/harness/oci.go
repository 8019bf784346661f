package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// BundleIdle and OCIRootfs are, under the bench cache dir, the OCI bundle
// that runs sleep infinity and its rootfs (the template, idmapped,
// read-only), as bench/lib.sh's write_bundle makes them.
func BundleIdle(dir string) string { return filepath.Join(dir, "bundle-idle") }

// OCIRootfs: see BundleIdle.
func OCIRootfs(dir string) string { return filepath.Join(dir, "bundle", "rootfs") }

// OCI is what a harness needs to run the OCI peers (runc, crun, …) from
// the command line: the installed tools, /dev/null for their stdio, the
// idmapped rootfs of the bundle and the mount namespace without the
// cgroup2 tree for crun, and why either cannot be used.
type OCI struct {
	Devnull   *os.File
	Bins      map[string]string // tool name -> path, when installed
	Legacy    *LegacyCgroupNS
	LegacyErr string
	OCIErr    string // why the OCI bundle cannot be used, if so
	HostID    int    // host uid of the OCI containers' root
}

// NewOCI opens /dev/null and looks the tools up; Close undoes it.
func NewOCI(tools ...string) (*OCI, error) {
	o := &OCI{Bins: map[string]string{}}
	var err error
	if o.Devnull, err = os.OpenFile(os.DevNull, os.O_RDWR, 0); err != nil {
		return nil, err
	}
	for _, t := range tools {
		if p, err := exec.LookPath(t); err == nil {
			o.Bins[t] = p
		}
	}
	return o, nil
}

// Mount mounts the template rootfs for bundle on ociRootfs, idmapped (see
// MountBundleRootfs), then starts the namespace without cgroup2; what
// fails is kept in OCIErr or LegacyErr. The idmapped rootfs first: the
// namespace without cgroup2 is a copy of this one, and crun must see the
// rootfs there too.
func (o *OCI) Mount(bundle, rootfs, ociRootfs string) {
	hostID, err := MountBundleRootfs(bundle, rootfs, ociRootfs)
	o.HostID = hostID
	if err != nil {
		o.OCIErr = err.Error()
	}
	if ns, err := NewLegacyCgroupNS(); err == nil {
		o.Legacy = ns
	} else {
		o.LegacyErr = err.Error()
	}
}

// Close ends the namespace without cgroup2.
func (o *OCI) Close() {
	if o.Legacy != nil {
		o.Legacy.Close()
		o.Legacy = nil
	}
}

// Unavailable says why tool (legacy: in the namespace without cgroup2)
// cannot run the bundle, or "".
func (o *OCI) Unavailable(tool string, legacy bool) string {
	switch {
	case o.Bins[tool] == "":
		return tool + " is not installed"
	case o.OCIErr != "":
		return o.OCIErr
	case legacy && o.Legacy == nil:
		return o.LegacyErr
	}
	return ""
}

// Slot is what one command in flight needs of its own: a file for its
// stderr. A file, not a pipe: a detached container inherits the stderr of
// `run -d`, and a pipe would keep Wait waiting for it.
type Slot struct{ errFile *os.File }

// NewSlot makes a slot; pattern names its (at once removed) file.
func NewSlot(pattern string) (*Slot, error) {
	f, err := os.CreateTemp("", pattern)
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name()) // the open file stays usable
	return &Slot{errFile: f}, nil
}

// Close closes the slot's file.
func (s *Slot) Close() { s.errFile.Close() }

// Run runs argv to completion within timeout, from the namespace without
// the cgroup2 mount when legacy, stdio on /dev/null and the slot's file.
// Its error names the tool and its subcommand ("podman rm", not "podman
// --runtime=runc") and ends with ToolMessage of its stderr.
func (o *OCI) Run(legacy bool, s *Slot, timeout time.Duration, argv []string) error {
	if err := s.errFile.Truncate(0); err != nil {
		return err
	}
	if _, err := s.errFile.Seek(0, 0); err != nil {
		return err
	}
	// Not the harness's context: on Ctrl-C a command in flight finishes
	// before the harness stops and removes what it made.
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = o.Devnull, o.Devnull, s.errFile
	var err error
	if legacy {
		// Forked from the namespace's thread, so that the child is in
		// its mount namespace; waited for from here.
		o.Legacy.Do(func() { err = cmd.Start() })
	} else {
		err = cmd.Start()
	}
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		s.errFile.Seek(0, 0)
		msg, _ := io.ReadAll(io.LimitReader(s.errFile, 1<<16))
		sub := ""
		for _, a := range argv[1:] {
			if !strings.HasPrefix(a, "-") {
				sub = " " + a
				break
			}
		}
		if ctx.Err() == context.DeadlineExceeded {
			return fmt.Errorf("%s%s: timed out after %v: %s", filepath.Base(argv[0]), sub, timeout, ToolMessage(msg))
		}
		return fmt.Errorf("%s%s: %v: %s", filepath.Base(argv[0]), sub, err, ToolMessage(msg))
	}
	return nil
}

// ToolMessage is the last line of a tool's stderr; of runc's logrus line
// (time="…" level=error msg="…"), only the message, so that the cause at
// its end survives OneLine's cut.
func ToolMessage(stderr []byte) string {
	line := OneLine(string(stderr))
	if _, m, ok := strings.Cut(strings.TrimSpace(string(stderr)), ` msg="`); ok && strings.HasPrefix(line, "time=") {
		if i := strings.LastIndexByte(m, '"'); i >= 0 {
			m = m[:i]
		}
		line = OneLine(strings.ReplaceAll(m, `\"`, `"`))
	}
	return line
}

// Output runs a command (not timed) and returns its standard output.
func Output(argv ...string) ([]byte, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return out, fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, OneLine(stderr.String()))
		}
		return out, err
	}
	return out, nil
}

// RemoveLeftovers deletes the runc and crun containers whose ids start
// with prefix (RemoveLeftoverOCI, with the installed tools) and returns a
// note per tool that had any, from note, then one per cgroup named with
// prefix that is still there.
func (o *OCI) RemoveLeftovers(prefix string, note func(tool string, ids []string) string) []string {
	var notes []string
	RemoveLeftoverOCI(o.Legacy, prefix, func(args ...string) ([]byte, error) {
		bin := o.Bins[args[0]]
		if bin == "" {
			return nil, errors.New(args[0] + " is not installed")
		}
		return Output(append([]string{bin}, args[1:]...)...)
	}, func(tool string, ids []string) {
		notes = append(notes, note(tool, ids))
	})
	return notes
}

// LeftoverCgroups notes every cgroup named with prefix that is still
// there.
func LeftoverCgroups(prefix string) []string {
	var notes []string
	for _, h := range []string{"memory", "pids", "cpu", "unified"} {
		ents, _ := os.ReadDir(filepath.Join("/sys/fs/cgroup", h))
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), prefix) {
				notes = append(notes, "cgroup left behind: "+filepath.Join("/sys/fs/cgroup", h, e.Name()))
			}
		}
	}
	return notes
}

// PrintLeftovers reports a harness's cleanup: before the runs (!report)
// only what it removed, if anything; after them, either that nothing was
// left (checked: what was looked at; then, after a "; ", clean) or the
// notes, followed by the lines of after.
func PrintLeftovers(report bool, notes []string, checked, clean string, after ...string) {
	if !report {
		if len(notes) > 0 {
			fmt.Println("removed containers left by an earlier run:")
			for _, n := range notes {
				fmt.Println("  " + n)
			}
		}
		return
	}
	if len(notes) == 0 {
		fmt.Printf("leftover containers: none (%s); %s\n", checked, clean)
		return
	}
	fmt.Println("leftovers found after the runs:")
	for _, n := range append(notes, after...) {
		fmt.Println("  " + n)
	}
}
