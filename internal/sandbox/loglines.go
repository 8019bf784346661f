package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// What reading a log holds in memory, whatever the log holds. envd's log
// is the standard error of a process the sandbox's root can write to, so
// it may hold any bytes: one line of megabytes, lines of thousands of
// fields, no line break at all.
const (
	// maxLogLine is the longest line read whole and decoded. Of a longer
	// one only the first maxLogValue bytes are read, and kept as the
	// message of an error entry that says how long the line was.
	maxLogLine = 64 << 10
	// logChunk is how much of the log a backward read reads at a time.
	logChunk = 64 << 10
)

// forwardLines reads a log's lines from its start.
type forwardLines struct {
	r    *bufio.Reader
	long []byte // the start of a line longer than maxLogLine
}

func newForwardLines(r io.ReaderAt, size int64) *forwardLines {
	return &forwardLines{r: bufio.NewReaderSize(io.NewSectionReader(r, 0, size), maxLogLine+1)}
}

// next returns the next line without its line break, and its length n.
// The line is whole when n <= maxLogLine, else its first maxLogValue
// bytes; it is valid until the next call. At the end next returns
// io.EOF.
func (f *forwardLines) next() (line []byte, n int, err error) {
	line, err = f.r.ReadSlice('\n')
	switch {
	case err == nil:
		return line[:len(line)-1], len(line) - 1, nil
	case err == io.EOF && len(line) > 0:
		// A last line without a line break (envd was writing it).
		return line, len(line), nil
	case !errors.Is(err, bufio.ErrBufferFull):
		return nil, 0, err
	}
	f.long = append(f.long[:0], line[:maxLogValue]...)
	n = len(line)
	for errors.Is(err, bufio.ErrBufferFull) {
		line, err = f.r.ReadSlice('\n')
		n += len(line)
	}
	switch {
	case err == nil:
		n-- // the line break
	case err != io.EOF:
		return nil, 0, err
	}
	return f.long, n, nil
}

// backwardLines reads a log's lines from its end, in chunks of
// logChunk bytes. It looks for line breaks in a cached chunk and reads a
// line that the chunk does not hold whole on its own.
type backwardLines struct {
	r io.ReaderAt
	// end is where the next line (going backward) ends, before its line
	// break; -1 once every line was read. trimmed is set once the log's
	// final line break is left out.
	end     int64
	trimmed bool
	// chunk caches r's bytes from chunkOff; mem backs it.
	chunk    []byte
	chunkOff int64
	mem      []byte
	// line backs a line read apart from the chunk.
	line []byte
}

func newBackwardLines(r io.ReaderAt, size int64) *backwardLines {
	b := &backwardLines{r: r, end: size}
	if size == 0 {
		b.end = -1
	}
	return b
}

// next returns the line before the previous one (the last line first)
// as forwardLines.next does; at the start of the log it returns io.EOF.
func (b *backwardLines) next() (line []byte, n int, err error) {
	if !b.trimmed {
		// A line break that ends the log ends its last line, not an
		// empty one after it.
		b.trimmed = true
		if b.end > 0 {
			c, err := b.byteAt(b.end - 1)
			if err != nil {
				return nil, 0, err
			}
			if c == '\n' {
				b.end--
			}
		}
	}
	if b.end < 0 {
		return nil, 0, io.EOF
	}
	nl, err := b.lastNewline(b.end)
	if err != nil {
		return nil, 0, err
	}
	start, end := nl+1, b.end
	b.end = nl
	n64 := end - start
	if n64 > maxLogLine {
		end = start + maxLogValue
	}
	if start >= b.chunkOff && end <= b.chunkOff+int64(len(b.chunk)) {
		return b.chunk[start-b.chunkOff : end-b.chunkOff], int(n64), nil
	}
	if b.line == nil {
		b.line = make([]byte, maxLogLine)
	}
	line = b.line[:end-start]
	if err := readAt(b.r, line, start); err != nil {
		return nil, 0, err
	}
	return line, int(n64), nil
}

// lastNewline returns the offset of the last line break before hi, or
// -1 if there is none.
func (b *backwardLines) lastNewline(hi int64) (int64, error) {
	for hi > 0 {
		if hi <= b.chunkOff || hi > b.chunkOff+int64(len(b.chunk)) {
			if err := b.load(hi); err != nil {
				return 0, err
			}
		}
		if i := bytes.LastIndexByte(b.chunk[:hi-b.chunkOff], '\n'); i >= 0 {
			return b.chunkOff + int64(i), nil
		}
		hi = b.chunkOff
	}
	return -1, nil
}

// byteAt returns the byte at off.
func (b *backwardLines) byteAt(off int64) (byte, error) {
	if off < b.chunkOff || off >= b.chunkOff+int64(len(b.chunk)) {
		if err := b.load(off + 1); err != nil {
			return 0, err
		}
	}
	return b.chunk[off-b.chunkOff], nil
}

// load caches the chunk that ends at hi.
func (b *backwardLines) load(hi int64) error {
	if b.mem == nil {
		b.mem = make([]byte, logChunk)
	}
	lo := max(0, hi-logChunk)
	b.chunk, b.chunkOff = b.mem[:hi-lo], lo
	if err := readAt(b.r, b.chunk, lo); err != nil {
		b.chunk = nil
		return err
	}
	return nil
}

// readAt fills p from r at off. A log found shorter than it was (the
// runtime emptied a file it rotates) ends there: io.EOF.
func readAt(r io.ReaderAt, p []byte, off int64) error {
	n, err := r.ReadAt(p, off)
	switch {
	case n == len(p):
		return nil
	case err == nil, errors.Is(err, io.EOF):
		return io.EOF
	}
	return err
}
