// Package sparse writes files that keep their holes. What `hutch cp` reads
// from a sandbox (an HTTP body, a tar entry) says nothing about holes, so a
// file that was sparse there would be written out in full here; [Copy]
// finds whole blocks of zeros in the stream and seeks over them instead of
// writing them, as GNU cp --sparse=auto and tar -x do.
package sparse

import (
	"bytes"
	"io"
	"os"
)

// BlockSize is the unit of hole detection: an aligned BlockSize block of
// the stream (or its last, shorter one) that holds only zeros is skipped,
// never part of one. It is the block size of the usual Linux file systems.
const BlockSize = 4096

// chunk is how much Copy reads at a time: a whole number of blocks.
const chunk = 16 * BlockSize

var zeros [BlockSize]byte

// Copy writes all of r into f from offset 0, leaving a hole wherever an
// aligned block of BlockSize bytes (or the stream's last, shorter block)
// is all zeros, and sets f's size to the stream's length at the end, so
// that a trailing hole is kept. f's bytes read back exactly as r's: only
// its allocation differs. It returns the number of bytes copied.
//
// f must be empty and open for writing without O_APPEND; Copy leaves its
// offset where it was. It reads r to EOF and returns nil then. An error
// from r comes back as it is, after what was read before it has been
// written; an error writing f (ENOSPC among them) is an *os.PathError.
// On an error f holds a partial copy: removing it is the caller's job.
func Copy(f *os.File, r io.Reader) (int64, error) {
	buf := make([]byte, chunk)
	var off int64
	for {
		n, eof, rerr := fill(r, buf)
		if err := writeData(f, buf[:n], off); err != nil {
			return off, err
		}
		off += int64(n)
		if rerr != nil {
			return off, rerr
		}
		if eof {
			break
		}
	}
	if err := f.Truncate(off); err != nil {
		return off, err
	}
	return off, nil
}

// fill reads from r until buf is full, r ends (eof) or r fails. Unlike
// io.ReadFull it tells the end of r from r's own io.ErrUnexpectedEOF (a
// tar entry cut short), which is an error.
func fill(r io.Reader, buf []byte) (n int, eof bool, err error) {
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		switch {
		case err == io.EOF:
			return n, true, nil
		case err != nil:
			return n, false, err
		}
	}
	return n, false, nil
}

// writeData writes the blocks of b that are not all zeros at off, one
// write per run of such blocks; b starts on a block boundary.
func writeData(f *os.File, b []byte, off int64) error {
	for len(b) > 0 {
		data := 0 // b[:data] is a run of blocks with data
		for data < len(b) && !isZero(block(b, data)) {
			data += len(block(b, data))
		}
		if data > 0 {
			if _, err := f.WriteAt(b[:data], off); err != nil {
				return err
			}
		}
		hole := data // b[data:hole] is a run of zero blocks
		for hole < len(b) && isZero(block(b, hole)) {
			hole += len(block(b, hole))
		}
		b, off = b[hole:], off+int64(hole)
	}
	return nil
}

// block is the block of b that starts at i.
func block(b []byte, i int) []byte { return b[i:min(i+BlockSize, len(b))] }

func isZero(b []byte) bool { return bytes.Equal(b, zeros[:len(b)]) }
