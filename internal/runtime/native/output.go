package native

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/runtime"
)

// A detached first process (none of Stdin, Stdout and Stderr set: a daemon,
// `hutch run -d`, envd) writes to a pipe, never to a host file: a host file
// as its stdout would show its host path in /proc/self/fd/1 and could be
// grown past any disk limit with fallocate. The sandbox's init reads the
// pipe and keeps the newest output in two host files it holds and no
// sandbox process can reach (the init is not dumpable), each at most
// outputHalf bytes: when the current one is full the other is emptied and
// written next, and the full one's modification time is set a second back,
// so that it always reads as the older. Output reads the older file, then
// the newer. The files belong to the sandbox's root on the host (the
// init's uid), which the init needs to set their times.
const (
	outputLog    = "output.log"
	outputLogOld = "output.1.log"
	outputHalf   = 8 << 20
)

// outputRing writes into two files alternately, each up to half bytes,
// switching files between lines (only a line longer than half is split).
type outputRing struct {
	files [2]*os.File
	cur   int
	size  int64
	half  int64
}

func (o *outputRing) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 {
		if o.size >= o.half {
			prev := o.files[o.cur]
			o.cur ^= 1
			if err := o.files[o.cur].Truncate(0); err != nil {
				return total - len(p), err
			}
			o.size = 0
			back := time.Now().Add(-time.Second)
			tv := unix.NsecToTimeval(back.UnixNano())
			unix.Futimes(int(prev.Fd()), []unix.Timeval{tv, tv})
		}
		n := len(p)
		full := false
		if room := o.half - o.size; int64(n) >= room {
			// Up to the last line break that fits; a line that does not
			// fit starts the next file, unless it is longer than a file.
			n, full = int(room), true
			if i := bytes.LastIndexByte(p[:n], '\n'); i >= 0 {
				n = i + 1
			} else if o.size > 0 {
				n = 0
			}
		}
		// The files are opened O_APPEND: after a truncation writes start at 0.
		w, err := o.files[o.cur].Write(p[:n])
		o.size += int64(w)
		p = p[w:]
		if err != nil {
			return total - len(p), err
		}
		if full {
			o.size = o.half
		}
	}
	return total, nil
}

// openOutputFiles creates a new sandbox's two output files for its init,
// owned by uid (the sandbox's root on the host).
func openOutputFiles(dir string, uid int) ([2]*os.File, error) {
	var files [2]*os.File
	for i, name := range []string{outputLog, outputLogOld} {
		// No symlink followed: the files are written by root.
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND|os.O_TRUNC|unix.O_NOFOLLOW, 0o600)
		if err == nil {
			if err = f.Chown(uid, uid); err != nil {
				f.Close()
			}
		}
		if err != nil {
			if files[0] != nil {
				files[0].Close()
			}
			return files, fmt.Errorf("output log: %w", err)
		}
		files[i] = f
	}
	return files, nil
}

// copyOutput copies r into the ring until r ends or stop is closed; after
// stop it goes on only while data keeps coming within a short grace, so
// output written just before the first process exited is kept even if a
// process it left behind still holds the pipe.
func copyOutput(r *os.File, ring *outputRing, stop <-chan struct{}) {
	go func() {
		<-stop
		r.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	}()
	io.Copy(ring, r)
}

// readOutput opens a sandbox's output files as one log, the older first,
// each as long as it is now.
func readOutput(dir, id string) (*outputFiles, error) {
	type part struct {
		f    *os.File
		size int64
		mod  time.Time
	}
	var parts []part
	for _, name := range []string{outputLog, outputLogOld} {
		// No symlink followed, and a regular file only: the server reads
		// them as root (review 22 swapped one for a link to /etc/shadow).
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil {
			if fi, serr := f.Stat(); serr != nil || !fi.Mode().IsRegular() {
				f.Close()
				err = fmt.Errorf("output %s is not a regular file: %w", name, errdefs.ErrFailedPrecondition)
			}
		}
		if err != nil {
			for _, p := range parts {
				p.f.Close()
			}
			return nil, err
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			for _, p := range parts {
				p.f.Close()
			}
			return nil, err
		}
		parts = append(parts, part{f, fi.Size(), fi.ModTime()})
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("output of sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	if len(parts) == 2 && parts[1].mod.Before(parts[0].mod) {
		parts[0], parts[1] = parts[1], parts[0]
	}
	out := &outputFiles{}
	for _, p := range parts {
		out.files = append(out.files, p.f)
		out.sizes = append(out.sizes, p.size)
		out.size += p.size
	}
	return out, nil
}

// outputFiles is a sandbox's output files read as one runtime.OutputLog:
// the older file, then the newer, each up to the size it had when opened.
type outputFiles struct {
	files []*os.File
	sizes []int64
	size  int64
}

// Size is the length of both files when they were opened.
func (o *outputFiles) Size() int64 { return o.size }

// ReadAt reads the files as one. Should the init switch files meanwhile,
// it empties the one it writes next: a read that finds it shorter than it
// was ends there, with io.EOF.
func (o *outputFiles) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read output at %d: negative offset", off)
	}
	n := 0
	for i, f := range o.files {
		if len(p) == 0 {
			break
		}
		if off >= o.sizes[i] {
			off -= o.sizes[i]
			continue
		}
		want := p[:min(int64(len(p)), o.sizes[i]-off)]
		m, err := f.ReadAt(want, off)
		n += m
		p = p[m:]
		if m < len(want) {
			if err == nil {
				err = io.EOF
			}
			return n, err
		}
		off = 0
	}
	if len(p) > 0 {
		return n, io.EOF
	}
	return n, nil
}

// Close closes both files.
func (o *outputFiles) Close() error {
	for _, f := range o.files {
		f.Close()
	}
	return nil
}

// CopyOutput keeps what r carries (a first process's stdout and stderr,
// through a pipe) in dir's two output files as a sandbox's init does,
// until r ends: for another backend's process that holds the pipe
// (gVisor's shim). The files belong to uid.
func CopyOutput(dir string, uid int, r io.Reader) error {
	files, err := openOutputFiles(dir, uid)
	if err != nil {
		return err
	}
	defer files[0].Close()
	defer files[1].Close()
	_, err = io.Copy(&outputRing{files: files, half: outputHalf}, r)
	return err
}

// ReadOutput opens dir's output files (CopyOutput's) as one log, the
// older first; errdefs.ErrNotFound when there are none.
func ReadOutput(dir, id string) (runtime.OutputLog, error) {
	return readOutput(dir, id)
}
