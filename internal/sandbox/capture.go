package sandbox

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"

	"github.com/hutch-sandbox/hutch/internal/cabundle"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/template"
)

// Capturing a sandbox's files turns its writable layer into a layer of the
// template store: a build step's result, a snapshot, a fork's start, the
// files of a sandbox paused without its memory. One pipeline serves all:
//
//	runtime CaptureLayer (frozen sandbox) ─► drop the runtime's own files
//	  ─► drop the host's CA certificates envd installed ─► store (unpack, hash)
//
// The sandbox must be frozen (or exited) for the whole capture, so the layer
// holds still: every file is whole or absent, as it was at the freeze.

// captureLayer writes frozen sandbox sbx's writable layer into the template
// store as a layer held by lease. lower are the directories of the layers
// it was made over (bottom first): the CA filter reads the bundle there.
// keepCA keeps the CA certificates envd installed (a build that asked to).
func (m *Manager) captureLayer(ctx context.Context, sbx runtime.Sandbox, lower []string, lease *template.Lease, source string, keepCA bool, limit int64) (*template.Layer, error) {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(sbx.CaptureLayer(ctx, m.guard(pw, limit))) }()
	defer pr.Close()
	layer, err := m.storeLayer(ctx, pr, lower, lease, source, keepCA)
	if err != nil {
		return nil, fmt.Errorf("capture the files of sandbox %s: %w", sbx.ID(), err)
	}
	return layer, nil
}

// captureSpooled is captureLayer for a sandbox that runs on: the layer's
// tar is written to an unlinked file beside the store first, then thaw is
// called, and only then is the layer unpacked, hashed and synced into the
// store. The sandbox is frozen for as long as reading its layer takes,
// not for the store's work.
func (m *Manager) captureSpooled(ctx context.Context, sbx runtime.Sandbox, lower []string, lease *template.Lease, source string, thaw func(), limit int64) (*template.Layer, error) {
	if err := m.templates.CheckRoom(); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(m.templates.Dir(), ".capture-*")
	if err != nil {
		return nil, fmt.Errorf("capture the files of sandbox %s: %w", sbx.ID(), err)
	}
	os.Remove(f.Name())
	defer f.Close()
	w := bufio.NewWriterSize(m.guard(f, limit), 1<<20)
	err = sbx.CaptureLayer(ctx, w)
	if err == nil {
		err = w.Flush()
	}
	thaw()
	if err != nil {
		return nil, fmt.Errorf("capture the files of sandbox %s: %w", sbx.ID(), err)
	}
	layer, err := m.storeLayer(ctx, bufio.NewReaderSize(io.NewSectionReader(f, 0, 1<<62), 1<<20), lower, lease, source, false)
	if err != nil {
		return nil, fmt.Errorf("capture the files of sandbox %s: %w", sbx.ID(), err)
	}
	return layer, nil
}

// captureLimit bounds the tar a capture of a sandbox made from tpl may
// write: twice its disk limit (a layer's files, and the tar's headers), or
// nothing beyond the store's room when it has none. The bound is needed
// because a sparse file costs a sandbox no disk and a capture its whole
// length.
func (m *Manager) captureLimit(tpl *template.Template) int64 {
	return 2 * m.resourcesOf(tpl, Resources{}).DiskBytes
}

// guard bounds what a capture writes to w: at most limit bytes (0: no
// bound), and only while the template store's disk has room, checked
// every roomEvery bytes (it stops 256 MiB short of full).
func (m *Manager) guard(w io.Writer, limit int64) io.Writer {
	return &captureGuard{w: w, limit: limit, room: m.templates.CheckRoom}
}

// roomEvery is how often a capture checks the store's room.
const roomEvery = 32 << 20

type captureGuard struct {
	w            io.Writer
	n, limit     int64
	checkedUntil int64
	room         func() error
}

func (g *captureGuard) Write(p []byte) (int, error) {
	if g.limit > 0 && g.n+int64(len(p)) > g.limit {
		return 0, fmt.Errorf("the sandbox's files take more than %d MiB once captured (sparse files count at their full length), twice its disk limit: %w", g.limit>>20, errdefs.ErrResourceExhausted)
	}
	if g.n >= g.checkedUntil {
		if err := g.room(); err != nil {
			return 0, err
		}
		g.checkedUntil = g.n + roomEvery
	}
	n, err := g.w.Write(p)
	g.n += int64(n)
	return n, err
}

// storeLayer adds the captured layer tar r to the store: without the
// runtime's own files, and without the CA certificates envd installed
// unless keepCA.
func (m *Manager) storeLayer(ctx context.Context, r io.Reader, lower []string, lease *template.Lease, source string, keepCA bool) (*template.Layer, error) {
	if m.bundle != nil && !keepCA {
		fr, fw := io.Pipe()
		in := r
		go func() { fw.CloseWithError(cabundle.FilterLayer(in, fw, m.bundle, template.StackFS(lower))) }()
		defer fr.Close()
		r = fr
	}
	return m.templates.AddLayerFromTar(ctx, lease, source, withoutRuntimeFiles(r))
}

// CaptureToStore freezes internal sandbox id (a build step's) and adds its
// writable layer to the template store, held by lease; lower are the
// layers it was made over. The sandbox stays frozen; the caller discards
// it.
func (m *Manager) CaptureToStore(ctx context.Context, id string, lower []string, lease *template.Lease, source string, keepCA bool) (*template.Layer, error) {
	l, err := m.internalLive(id)
	if err != nil {
		return nil, err
	}
	if err := l.sbx.Freeze(ctx); err != nil {
		return nil, fmt.Errorf("freeze sandbox %s: %w", id, err)
	}
	var limit int64
	if st, err := l.sbx.Status(ctx); err == nil {
		if tpl, err := m.templates.Get(st.TemplateID); err == nil {
			limit = m.captureLimit(tpl)
		}
	}
	return m.captureLayer(ctx, l.sbx, lower, lease, source, keepCA, limit)
}

// withoutRuntimeFiles drops from a captured layer the files the runtime
// writes into every sandbox at start (its hostname, hosts and resolver),
// which belong to that sandbox, not to the template.
func withoutRuntimeFiles(r io.Reader) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		tr := tar.NewReader(r)
		tw := tar.NewWriter(pw)
		var err error
		for {
			var hdr *tar.Header
			hdr, err = tr.Next()
			if errors.Is(err, io.EOF) {
				err = tw.Close()
				break
			}
			if err != nil {
				break
			}
			switch path.Clean(hdr.Name) {
			case "etc/hostname", "etc/hosts", "etc/resolv.conf":
				continue
			}
			if err = tw.WriteHeader(hdr); err != nil {
				break
			}
			if _, err = io.Copy(tw, tr); err != nil {
				break
			}
		}
		pw.CloseWithError(err)
	}()
	return pr
}
