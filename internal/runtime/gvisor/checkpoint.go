package gvisor

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/runtime/native"
)

// savedRecord is the file a checkpoint keeps beside runsc's image: what
// the saved sandbox was made of, for Restore.
const savedRecord = "hutch-sandbox.json"

// savedSpecFile is the saved sandbox's OCI spec: runsc restores only under
// the same process, mounts and namespaces.
const savedSpecFile = "hutch-config.json"

// restoreSpec is the saved sandbox's spec on the new sandbox's paths and
// ids.
func (rt *Runtime) restoreSpec(checkpoint, dir string, rec *record) (*specs.Spec, error) {
	b, err := os.ReadFile(filepath.Join(checkpoint, savedSpecFile))
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", checkpoint, err)
	}
	var s specs.Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", checkpoint, err)
	}
	s.Root.Path = filepath.Join(dir, "rootfs")
	vol := 0
	for i, m := range s.Mounts {
		switch {
		case m.Destination == guestBinary:
			s.Mounts[i].Source = rt.binary
		case m.Type == "bind":
			if vol >= len(rec.Mounts) {
				return nil, fmt.Errorf("checkpoint %s: more volumes than its record: %w", checkpoint, errdefs.ErrInvalidArgument)
			}
			s.Mounts[i].Source = filepath.Join(dir, "vol", strconv.Itoa(vol))
			vol++
		}
	}
	m := []specs.LinuxIDMapping{{ContainerID: 0, HostID: uint32(rec.HostID), Size: uint32(rec.IDs)}}
	s.Linux.UIDMappings, s.Linux.GIDMappings = m, m
	s.Linux.CgroupsPath = rt.cgroupsPath(rec.ID)
	// The limits as this runtime sets them, not as the checkpoint's
	// runtime did: a checkpoint of an older one restores under today's
	// bounds (pids.max, TCP buffers: review 23).
	s.Linux.Resources = resources(rec)
	return &s, nil
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o600)
}

// Checkpoint implements runtime.Checkpointer with `runsc checkpoint
// --leave-running`: the sentry saves its whole kernel — every process,
// its memory, descriptors and sockets, and the writable layer's files —
// into dir, and the sandbox goes on. A sandbox with image roots is
// refused with errdefs.ErrNotImplemented (see images.go).
func (rt *Runtime) Checkpoint(ctx context.Context, id, dir string) error {
	rec, err := rt.readRecord(id)
	if err != nil {
		return err
	}
	if len(rec.Images) > 0 {
		return fmt.Errorf("sandbox %s: %w: %w", id, errImagesCheckpoint, errdefs.ErrNotImplemented)
	}
	st := rt.status(rec)
	if st.State == runtime.StateExited {
		return fmt.Errorf("sandbox %s has exited: %w", id, errdefs.ErrFailedPrecondition)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("checkpoint dir: %w", err)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) > 0 {
		return fmt.Errorf("checkpoint dir %s is not empty: %w", dir, errdefs.ErrInvalidArgument)
	}
	sdir := rt.sandboxDir(id)
	frozen := st.State == runtime.StateFrozen
	if frozen {
		// runsc saves a running sandbox (it stops it itself meanwhile);
		// it is paused again right after.
		if _, err := rt.runscCmd(ctx, sdir, "resume", id); err != nil {
			return err
		}
	}
	_, err = rt.runscCmd(ctx, sdir, "checkpoint", "--leave-running", "--image-path="+dir, id)
	if frozen {
		if _, perr := rt.runscCmd(context.WithoutCancel(ctx), sdir, "pause", id); perr != nil && err == nil {
			err = perr
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return err
	}
	if err := copyFile(filepath.Join(sdir, "bundle", "config.json"), filepath.Join(dir, savedSpecFile)); err != nil {
		os.RemoveAll(dir)
		return err
	}
	if err := writeJSON(filepath.Join(dir, savedRecord), rec); err != nil {
		os.RemoveAll(dir)
		return err
	}
	// The checkpoint holds the saved sandbox's ids while it exists (see
	// native.HoldIDs): removing it is enough to let them go, in time.
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(dir, "state.json"), map[string]int{"uidSlot": rec.Slot}); err != nil {
		os.RemoveAll(dir)
		return err
	}
	if err := rt.native.HoldIDs(idRange(rec), abs); err != nil {
		os.RemoveAll(dir)
		return err
	}
	return nil
}

// Restore implements runtime.Checkpointer with `runsc restore` in a new
// sandbox: new ids, new network namespace, a new link when the saved
// first process served extra files.
func (rt *Runtime) Restore(ctx context.Context, dir string, spec runtime.RestoreSpec) (runtime.Sandbox, error) {
	b, err := os.ReadFile(filepath.Join(dir, savedRecord))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s holds no gvisor checkpoint: %w", dir, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	var saved record
	if err := json.Unmarshal(b, &saved); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	if len(spec.ExtraFiles) != saved.Channels {
		return nil, fmt.Errorf("the saved sandbox served %d extra files, the restore gives %d: %w", saved.Channels, len(spec.ExtraFiles), errdefs.ErrInvalidArgument)
	}
	if spec.ID == "" {
		spec.ID = native.NewID()
	} else if !native.ValidID(spec.ID) {
		return nil, fmt.Errorf("sandbox id %q must be 3-63 lowercase letters, digits or dashes: %w", spec.ID, errdefs.ErrInvalidArgument)
	}
	for _, l := range saved.TemplateLayers {
		if _, err := os.Stat(l); err != nil {
			return nil, fmt.Errorf("the checkpoint's template %s is gone: %w", saved.Template, errdefs.ErrNotFound)
		}
	}
	// The restored kernel keeps the saved hostname: /etc/hosts names it.
	hostname := spec.ID
	var savedSpec specs.Spec
	if b, err := os.ReadFile(filepath.Join(dir, savedSpecFile)); err == nil && json.Unmarshal(b, &savedSpec) == nil && savedSpec.Hostname != "" {
		hostname = savedSpec.Hostname
	}
	rs := runtime.Spec{
		ID: spec.ID, Hostname: hostname, Labels: spec.Labels,
		Process: runtime.Process{Args: saved.Command, ExtraFiles: spec.ExtraFiles},
	}
	return rt.boot(ctx, bootSpec{
		spec: rs, checkpoint: dir, saved: &saved,
		tpl: tplInfo{Name: saved.Template, ID: saved.TemplateID, Layers: saved.TemplateLayers},
	})
}

// CaptureLayer writes the writable layer, from runsc's `tar
// rootfs-upper`, in the OCI layer format (see ociLayer).
func (s *sandbox) CaptureLayer(ctx context.Context, w io.Writer) error {
	st, err := s.Status(ctx)
	if err != nil {
		return err
	}
	if st.State == runtime.StateRunning {
		return fmt.Errorf("sandbox %s is running: freeze it first: %w", s.id, errdefs.ErrFailedPrecondition)
	}
	if st.State == runtime.StateExited {
		return fmt.Errorf("sandbox %s has exited and its layer with its sentry: %w", s.id, errdefs.ErrFailedPrecondition)
	}
	// Through a file: runsc's stdout is not only the archive.
	f, err := os.CreateTemp(s.dir, "layer-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := s.rt.runscCmd(ctx, s.dir, "tar", "rootfs-upper", "--file="+f.Name(), s.id); err != nil {
		return err
	}
	return ociLayer(f, w)
}

// ociLayer rewrites the tar runsc makes of an overlay's upper layer, in
// overlayfs's own terms (a deleted file is a 0/0 character device, a
// replaced directory has the trusted.overlay.opaque xattr, names start
// with "./"), into an OCI image layer: ".wh.NAME" and ".wh..wh..opq"
// entries, names relative to the root. No library converts between the
// two; the format is small (image-spec layer.md).
func ociLayer(r io.Reader, w io.Writer) error {
	tr := tar.NewReader(r)
	tw := tar.NewWriter(w)
	clean := func(n string) string { return strings.TrimPrefix(strings.TrimPrefix(n, "./"), "/") }
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("runsc's layer: %w", err)
		}
		name := clean(hdr.Name)
		if name == "" || name == "/" {
			continue // the root itself
		}
		if hdr.Typeflag == tar.TypeChar && hdr.Devmajor == 0 && hdr.Devminor == 0 {
			dir, base := path.Split(strings.TrimSuffix(name, "/"))
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: dir + ".wh." + base, Mode: 0o600, ModTime: hdr.ModTime, Format: tar.FormatPAX}); err != nil {
				return err
			}
			continue
		}
		opaque := false
		if hdr.PAXRecords != nil {
			for _, k := range []string{"SCHILY.xattr.trusted.overlay.opaque", "SCHILY.xattr.user.overlay.opaque"} {
				if v, ok := hdr.PAXRecords[k]; ok {
					opaque = opaque || v == "y"
					delete(hdr.PAXRecords, k)
				}
			}
		}
		hdr.Name = name
		if hdr.Typeflag == tar.TypeLink {
			hdr.Linkname = clean(hdr.Linkname)
		}
		hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tw, tr); err != nil {
				return err
			}
		}
		if opaque && hdr.Typeflag == tar.TypeDir {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimSuffix(name, "/") + "/.wh..wh..opq", Mode: 0o600, ModTime: hdr.ModTime, Format: tar.FormatPAX}); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

// limited keeps the first 4 KiB written to it.
type limited struct{ b []byte }

func (l *limited) Write(p []byte) (int, error) {
	if n := 4096 - len(l.b); n > 0 {
		l.b = append(l.b, p[:min(n, len(p))]...)
	}
	return len(p), nil
}

// idRange is the claim rec holds.
func idRange(rec *record) native.IDRange {
	return native.IDRange{Slot: rec.Slot, HostID: rec.HostID, Size: rec.IDs}
}
