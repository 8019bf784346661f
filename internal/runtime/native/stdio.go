package native

import (
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/hutch-sandbox/hutch/internal/runtime"
)

// stdio carries a first process's streams. The sandbox's processes only
// ever get pipe ends (or /dev/null, or a pty made inside): host file
// descriptors such as a terminal or a log file are never passed to them, so
// nothing can be reopened through /proc/self/fd, grown on the host, or
// abused with terminal ioctls. A detached process's output files go to the
// init only (see outputRing).
type stdio struct {
	childIn, childOut, childErr *os.File // handed to the init, closed here after start
	// log is set when childOut and childErr are the output files the init
	// writes the process's output to (a detached process).
	log        bool
	parentEnds []*os.File
	copies     []func()
	outputs    sync.WaitGroup
}

func newStdio(p *runtime.Process, dir string, hostUID int) (*stdio, error) {
	s := &stdio{}
	devNull := func() (*os.File, error) { return os.OpenFile(os.DevNull, os.O_RDWR, 0) }
	var err error
	if p.Terminal {
		// The process runs on a pty made inside the sandbox; see attachConsole.
		if s.childIn, err = devNull(); err != nil {
			return nil, err
		}
		s.childOut, s.childErr = s.childIn, s.childIn
		return s, nil
	}
	if p.Stdin == nil {
		s.childIn, err = devNull()
	} else {
		var w *os.File
		if s.childIn, w, err = os.Pipe(); err == nil {
			s.parentEnds = append(s.parentEnds, w)
			in := p.Stdin
			s.copies = append(s.copies, func() { io.Copy(w, in); w.Close() })
		}
	}
	if err != nil {
		return nil, fmt.Errorf("stdin: %w", err)
	}
	if p.Stdin == nil && p.Stdout == nil && p.Stderr == nil {
		// The init's, not the process's: it keeps the output (see outputRing).
		files, err := openOutputFiles(dir, hostUID)
		if err != nil {
			return nil, err
		}
		s.childOut, s.childErr, s.log = files[0], files[1], true
		return s, nil
	}
	if s.childOut, err = s.output(p.Stdout); err != nil {
		return nil, fmt.Errorf("stdout: %w", err)
	}
	if p.Stdout != nil && sameWriter(p.Stdout, p.Stderr) {
		// One writer, one pipe: as os/exec does, so that a writer that is
		// not safe for concurrent use is written by one goroutine only.
		s.childErr = s.childOut
		return s, nil
	}
	if s.childErr, err = s.output(p.Stderr); err != nil {
		return nil, fmt.Errorf("stderr: %w", err)
	}
	return s, nil
}

// sameWriter reports whether a and b are the same comparable writer.
func sameWriter(a, b io.Writer) (same bool) {
	defer func() {
		if recover() != nil {
			same = false // uncomparable dynamic types
		}
	}()
	return a == b
}

func (s *stdio) output(w io.Writer) (*os.File, error) {
	if w == nil {
		return os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	}
	r, wr, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	s.parentEnds = append(s.parentEnds, r)
	s.outputs.Add(1)
	s.copies = append(s.copies, func() { io.Copy(w, r); r.Close(); s.outputs.Done() })
	return wr, nil
}

// attachConsole joins the process's pty master to its Stdin and Stdout.
func (s *stdio) attachConsole(console *os.File, p *runtime.Process) {
	if p.Stdin != nil {
		in := p.Stdin
		s.copies = append(s.copies, func() { io.Copy(console, in) })
	}
	if p.Stdout != nil {
		out := p.Stdout
		s.outputs.Add(1)
		// Reading a pty master fails with EIO once the last slave closes.
		s.copies = append(s.copies, func() { io.Copy(out, console); s.outputs.Done() })
	}
}

func (s *stdio) start() {
	for _, c := range s.copies {
		go c()
	}
}

// wait returns once all output has been copied.
func (s *stdio) wait() { s.outputs.Wait() }

func (s *stdio) closeChildEnds() {
	seen := map[*os.File]bool{}
	for _, f := range []*os.File{s.childIn, s.childOut, s.childErr} {
		if f != nil && !seen[f] {
			seen[f] = true
			f.Close()
		}
	}
}

func (s *stdio) closeParentEnds() {
	for _, f := range s.parentEnds {
		f.Close()
	}
}
