package sparse

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Sizes the cases are built from.
const (
	B   = BlockSize
	MiB = 1 << 20
)

// seg is a part of a test file: n zero bytes, or data (no zero byte).
type seg struct {
	zeros int
	data  []byte
}

func z(n int) seg      { return seg{zeros: n} }
func d(s string) seg   { return seg{data: []byte(s)} }
func random(n int) seg { return seg{data: noZeros(rand.New(rand.NewPCG(1, uint64(n))), n)} }
func noZeros(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(1 + r.IntN(255))
	}
	return b
}

// build is the file the segments make, and how much of it a sparse copy
// must allocate at most: every block with a data byte in it.
func build(segs []seg) (content []byte, dataBlocks int64) {
	var buf bytes.Buffer
	for _, s := range segs {
		buf.Write(make([]byte, s.zeros))
		buf.Write(s.data)
	}
	content = buf.Bytes()
	for i := 0; i < len(content); i += B {
		if !isZero(block(content, i)) {
			dataBlocks++
		}
	}
	return content, dataBlocks
}

// chopped reads at most n bytes at a time, so that blocks straddle reads.
type chopped struct {
	r io.Reader
	n int
}

func (c chopped) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }

// allocated is what the file system holds for p, in bytes.
func allocated(t *testing.T, p string) int64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Blocks * 512
}

func TestCopy(t *testing.T) {
	// slack covers a file system's own blocks (extent trees) and a block
	// size larger than B.
	const slack = 64 << 10
	for _, tc := range []struct {
		name string
		segs []seg
	}{
		{"empty", nil},
		{"one data byte", []seg{d("x")}},
		{"one zero byte", []seg{z(1)}},
		{"a short block of zeros", []seg{z(B - 1)}},
		{"all zeros", []seg{z(8 * MiB)}},
		{"all zeros, not a whole block", []seg{z(8*MiB + 123)}},
		{"data then hole", []seg{random(100 << 10), z(8 * MiB)}},
		{"hole then data", []seg{z(8 * MiB), d("tail")}},
		{"data, hole, data", []seg{random(3 * B), z(8 * MiB), random(5 * B)}},
		{"trailing hole after a data block", []seg{random(B), z(4 * MiB)}},
		{"trailing hole shorter than a block", []seg{random(B), z(100)}},
		{"zeros within a block stay", []seg{d("x"), z(B - 2), d("y"), z(8 * MiB)}},
		{"data on a block's last byte", []seg{z(B - 1), d("x"), z(8 * MiB)}},
		{"data on a block's first byte", []seg{z(B), d("x"), z(8 * MiB)}},
		{"data across a read boundary", []seg{z(chunk - 1), d("xy"), z(8 * MiB)}},
		{"data ending on a read boundary", []seg{z(chunk - 2), d("xy"), z(chunk), d("z")}},
		{"holes of one block between data", []seg{random(B), z(B), random(B), z(B), random(B)}},
		{"a 64 MiB hole", []seg{d("head"), z(64 * MiB), d("end")}},
	} {
		content, dataBlocks := build(tc.segs)
		for _, rd := range []struct {
			name string
			r    func() io.Reader
		}{
			{"whole reads", func() io.Reader { return bytes.NewReader(content) }},
			{"short reads", func() io.Reader { return chopped{bytes.NewReader(content), 1000} }},
		} {
			t.Run(tc.name+"/"+rd.name, func(t *testing.T) {
				p := filepath.Join(t.TempDir(), "f")
				f, err := os.Create(p)
				if err != nil {
					t.Fatal(err)
				}
				n, err := Copy(f, rd.r())
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				if err != nil || n != int64(len(content)) {
					t.Fatalf("Copy = %d, %v; want %d, nil", n, err, len(content))
				}
				got, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, content) {
					t.Fatalf("the copy differs: %d bytes, want %d", len(got), len(content))
				}
				if alloc, most := allocated(t, p), dataBlocks*B+slack; alloc > most {
					t.Errorf("%d bytes allocated for %d of data blocks in %d; want at most %d", alloc, dataBlocks*B, len(content), most)
				}
			})
		}
	}
}

// TestCopyRandom copies files of random data and zero runs of random
// lengths: the bytes never change.
func TestCopyRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	dir := t.TempDir()
	for i := range 50 {
		var segs []seg
		for range rng.IntN(8) {
			if rng.IntN(2) == 0 {
				segs = append(segs, z(rng.IntN(3*chunk)))
			} else {
				segs = append(segs, seg{data: noZeros(rng, 1+rng.IntN(2*B))})
			}
		}
		content, _ := build(segs)
		p := filepath.Join(dir, "f")
		os.Remove(p)
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Copy(f, chopped{bytes.NewReader(content), 1 + rng.IntN(3*B)})
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(p); !bytes.Equal(got, content) {
			t.Fatalf("file %d (%d bytes): the copy differs", i, len(content))
		}
	}
}

// failing yields data then fails.
type failing struct {
	r   io.Reader
	err error
}

func (f failing) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err == io.EOF {
		err = f.err
	}
	return n, err
}

func TestCopyErrors(t *testing.T) {
	dir := t.TempDir()

	for _, readErr := range []error{errors.New("boom"), io.ErrUnexpectedEOF} {
		t.Run(fmt.Sprintf("read error %q comes back after what came before it", readErr), func(t *testing.T) {
			content, _ := build([]seg{random(B + 10), z(chunk)})
			f, err := os.Create(filepath.Join(dir, "read"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			n, err := Copy(f, failing{chopped{bytes.NewReader(content), 1000}, readErr})
			if err != readErr || n != int64(len(content)) {
				t.Fatalf("Copy = %d, %v; want %d, %v", n, err, len(content), readErr)
			}
			got, _ := os.ReadFile(f.Name())
			if len(got) < B+10 || !bytes.HasPrefix(content, got) {
				t.Errorf("the partial copy has %d bytes, want a start of the stream with its %d of data", len(got), B+10)
			}
		})
	}

	t.Run("a write error is a PathError", func(t *testing.T) {
		p := filepath.Join(dir, "ro")
		os.WriteFile(p, nil, 0o600)
		f, err := os.Open(p) // read-only
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		_, err = Copy(f, bytes.NewReader([]byte("data")))
		var pe *fs.PathError
		if !errors.As(err, &pe) {
			t.Fatalf("Copy into a read-only file: %v (%T), want a *fs.PathError", err, err)
		}
	})

	t.Run("ENOSPC", func(t *testing.T) {
		f, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
		if err != nil {
			t.Skip(err)
		}
		defer f.Close()
		_, err = Copy(f, bytes.NewReader([]byte("data")))
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("Copy to /dev/full: %v, want ENOSPC", err)
		}
	})
}
