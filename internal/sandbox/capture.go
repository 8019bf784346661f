package sandbox

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"path"

	"github.com/hutch-sandbox/hutch/internal/cabundle"
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
func (m *Manager) captureLayer(ctx context.Context, sbx runtime.Sandbox, lower []string, lease *template.Lease, source string, keepCA bool) (*template.Layer, error) {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(sbx.CaptureLayer(ctx, pw)) }()
	defer pr.Close()
	var r io.Reader = pr
	if m.bundle != nil && !keepCA {
		fr, fw := io.Pipe()
		go func() { fw.CloseWithError(cabundle.FilterLayer(pr, fw, m.bundle, template.StackFS(lower))) }()
		defer fr.Close()
		r = fr
	}
	layer, err := m.templates.AddLayerFromTar(ctx, lease, source, withoutRuntimeFiles(r))
	if err != nil {
		return nil, fmt.Errorf("capture the files of sandbox %s: %w", sbx.ID(), err)
	}
	return layer, nil
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
	return m.captureLayer(ctx, l.sbx, lower, lease, source, keepCA)
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
