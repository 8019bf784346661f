package gvisor

import (
	"io"
	"os"
	"sync"

	"github.com/hutch-sandbox/hutch/internal/runtime"
)

// stdio is the first process's standard streams as its creator holds
// them: pipes copied to and from the caller's readers and writers, the
// sandbox's log, or a console.
type stdio struct {
	p                           *runtime.Process
	childIn, childOut, childErr *os.File // what the shim passes to runsc
	parentIn                    *os.File // written from p.Stdin
	parentOut, parentErr        *os.File // copied to p.Stdout, p.Stderr
	wg                          sync.WaitGroup
	done                        chan struct{} // closed when output is drained
	// log is set when the shim keeps the output in the sandbox's log.
	log bool
}

// newStdio makes the streams for p. A process given none of them (a
// daemon), or a restored one, writes to the sandbox's log, output.log.
func newStdio(p *runtime.Process, dir string, restored bool) (*stdio, error) {
	s := &stdio{p: p, done: make(chan struct{})}
	devNull := func() (*os.File, error) { return os.OpenFile(os.DevNull, os.O_RDWR, 0) }
	var err error
	if restored || p.Terminal || (p.Stdin == nil && p.Stdout == nil && p.Stderr == nil) {
		// A daemon's output (and a restored process's) goes to a pipe the
		// shim keeps in the sandbox's log (shimConfig.Log), never to a host
		// file: a host file as its stdout could be grown past any disk
		// limit with fallocate, or made huge and sparse (review 21).
		if s.childIn, err = devNull(); err != nil {
			return nil, err
		}
		s.childOut, _ = devNull()
		s.childErr, _ = devNull()
		s.log = !p.Terminal
		return s, nil
	}
	if p.Stdin != nil {
		if s.childIn, s.parentIn, err = os.Pipe(); err != nil {
			return nil, err
		}
	} else if s.childIn, err = devNull(); err != nil {
		return nil, err
	}
	for _, w := range []struct {
		set    io.Writer
		child  **os.File
		parent **os.File
	}{{p.Stdout, &s.childOut, &s.parentOut}, {p.Stderr, &s.childErr, &s.parentErr}} {
		if w.set == nil {
			if *w.child, err = devNull(); err != nil {
				s.closeChildEnds()
				s.closeParentEnds()
				return nil, err
			}
			continue
		}
		if *w.parent, *w.child, err = os.Pipe(); err != nil {
			s.closeChildEnds()
			s.closeParentEnds()
			return nil, err
		}
	}
	return s, nil
}

func (s *stdio) closeChildEnds() {
	for _, f := range []*os.File{s.childIn, s.childOut, s.childErr} {
		if f != nil {
			f.Close()
		}
	}
}

func (s *stdio) closeParentEnds() {
	for _, f := range []*os.File{s.parentIn, s.parentOut, s.parentErr} {
		if f != nil {
			f.Close()
		}
	}
}

// lockedWriter serialises writes when stdout and stderr are one writer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// start copies the streams; done closes when both outputs have ended.
func (s *stdio) start() {
	out, errw := s.p.Stdout, s.p.Stderr
	if out != nil && errw != nil && isSame(out, errw) {
		lw := &lockedWriter{w: out}
		out, errw = lw, lw
	}
	if s.parentIn != nil {
		go func() {
			io.Copy(s.parentIn, s.p.Stdin)
			s.parentIn.Close()
		}()
	}
	for _, c := range []struct {
		r *os.File
		w io.Writer
	}{{s.parentOut, out}, {s.parentErr, errw}} {
		if c.r == nil {
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			io.Copy(c.w, c.r)
			c.r.Close()
		}()
	}
	go func() {
		s.wg.Wait()
		close(s.done)
	}()
}

// isSame reports whether two writers are one comparable value.
func isSame(a, b io.Writer) (same bool) {
	defer func() { recover() }() // incomparable dynamic types
	return a == b
}

// attachConsole joins the process's Stdin and Stdout to the console.
func (s *stdio) attachConsole(console *os.File, p *runtime.Process) {
	if p.Stdin != nil {
		go io.Copy(console, p.Stdin)
	}
	if p.Stdout != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			io.Copy(p.Stdout, console) // ends with EIO when the last slave closes
		}()
	}
}
