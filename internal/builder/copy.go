package builder

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	securejoin "github.com/cyphar/filepath-securejoin"
	"github.com/cyphar/filepath-securejoin/pathrs-lite"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/passwd"
	"github.com/hutch-sandbox/hutch/internal/template"
)

// MaxUpload bounds one uploaded archive of COPY files.
const MaxUpload = 4 << 30

// HasFiles reports whether keyID uploaded the archive of COPY files under
// hash.
func (b *Builder) HasFiles(keyID, hash string) bool {
	if !template.ValidHash(hash) {
		return false
	}
	_, err := os.Stat(b.store.FilePath(keyID, hash))
	return err == nil
}

// PutFiles stores an archive of COPY files (a tar, gzipped or not) keyID
// uploaded under hash. It must be exactly size bytes (-1: unknown) and
// read whole as a tar, else nothing is kept; an archive the key uploaded
// under that hash before is kept as it is (the first upload wins). The
// hash is checked against the content when a COPY step uses the archive
// (verifyFiles), which is when the step it hashes is known. An upload
// stops when the template store's disk is down to its last 256 MiB.
func (b *Builder) PutFiles(keyID, hash string, r io.Reader, size int64) error {
	if !template.ValidHash(hash) {
		return fmt.Errorf("files hash %q: 64 lowercase hex digits: %w", hash, errdefs.ErrInvalidArgument)
	}
	if size > MaxUpload {
		return fmt.Errorf("archive of %d bytes is over the %d byte limit: %w", size, int64(MaxUpload), errdefs.ErrInvalidArgument)
	}
	if err := b.store.CheckRoom(); err != nil {
		return err
	}
	final := b.store.FilePath(keyID, hash)
	if _, err := os.Stat(final); err == nil {
		_, err := io.Copy(io.Discard, io.LimitReader(r, MaxUpload))
		return err
	}
	dir := filepath.Dir(final)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".upload-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	var n int64
	for {
		m, err := io.Copy(f, io.LimitReader(r, 64<<20))
		n += m
		if errors.Is(err, io.ErrUnexpectedEOF) {
			// The client's fault: its body ended before its Content-Length.
			return fmt.Errorf("upload: the body ended after %d bytes, Content-Length said %d: %w", n, size, errdefs.ErrInvalidArgument)
		}
		if err != nil {
			return fmt.Errorf("upload: %w", err)
		}
		if n > MaxUpload {
			return fmt.Errorf("archive over the %d byte limit: %w", int64(MaxUpload), errdefs.ErrInvalidArgument)
		}
		if m < 64<<20 {
			break
		}
		if err := b.store.CheckRoom(); err != nil {
			return err
		}
	}
	if size >= 0 && n != size {
		return fmt.Errorf("upload: got %d bytes, Content-Length said %d: %w", n, size, errdefs.ErrInvalidArgument)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if _, err := readFiles(f, nil); err != nil {
		return fmt.Errorf("upload is not a whole tar archive: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := os.Link(f.Name(), final); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// readFiles reads a tar (gzipped or not) whole; each entry is passed to
// fn, nil to only check the archive.
func readFiles(r io.Reader, fn func(*tar.Header, io.Reader) error) (int, error) {
	br := bufio.NewReader(r)
	var in io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return 0, err
		}
		defer zr.Close()
		in = zr
	}
	tr := tar.NewReader(in)
	n := 0
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
		if fn != nil {
			if err := fn(hdr, tr); err != nil {
				return n, err
			}
		} else if _, err := io.Copy(io.Discard, tr); err != nil {
			return n, err
		}
	}
}

// copyStep makes the layer of a COPY step: the files under src in the
// archive the step names, at dest, owned by the step's user, with its
// mode, extracted into an overlay of the layers so far.
func (b *Builder) copyStep(ctx context.Context, st *state, name string, step template.Step, key string) (string, error) {
	archivePath := b.store.FilePath(st.bd.KeyID, step.FilesHash)
	now := time.Now()
	if err := os.Chtimes(archivePath, now, now); err != nil { // in use: kept another day

		return "", fmt.Errorf("the files of COPY %s were not uploaded (filesHash %s): %w", step.Args[0], step.FilesHash, errdefs.ErrFailedPrecondition)
	}
	if err := verifyFiles(step, archivePath); err != nil {
		return "", err
	}
	src := path.Clean(strings.TrimPrefix(step.Args[0], "./"))
	if path.IsAbs(src) || src == ".." || strings.HasPrefix(src, "../") {
		return "", fmt.Errorf("COPY source %q must be inside the build context: %w", step.Args[0], errdefs.ErrInvalidArgument)
	}
	dest := resolvePath(st.cfg.DefaultWorkdir, step.Args[1])
	intoDir := strings.HasSuffix(step.Args[1], "/")
	user := st.cfg.DefaultUser
	if len(step.Args) > 2 && step.Args[2] != "" {
		user = step.Args[2]
	}
	mode := int64(-1)
	if len(step.Args) > 3 && step.Args[3] != "" {
		m, _ := strconv.ParseUint(step.Args[3], 8, 32)
		mode = int64(m & 0o7777)
	}
	glob := strings.ContainsAny(src, "*?[")
	copied := 0
	layer, err := b.store.AddLayerOver(st.lease, "build "+st.bd.Template+" step "+name, key, st.layers, func(merged string) error {
		u, err := lookupUser(merged, user)
		if err != nil {
			return fmt.Errorf("COPY owner: %w", err)
		}
		destIsDir := false
		if p, err := securejoin.SecureJoin(merged, dest); err == nil {
			if fi, err := os.Stat(p); err == nil && fi.IsDir() {
				destIsDir = true
			}
		}
		intoDir = intoDir || destIsDir
		f, err := os.Open(archivePath)
		if err != nil {
			return err
		}
		defer f.Close()
		pr, pw := io.Pipe()
		go func() {
			tw := tar.NewWriter(pw)
			roots := map[string]byte{} // matched source -> its type
			_, err := readFiles(f, func(hdr *tar.Header, body io.Reader) error {
				n := path.Clean(strings.TrimPrefix(hdr.Name, "./"))
				root, rel, ok := matchSource(src, glob, n, roots)
				if !ok {
					return nil
				}
				if rel == "" {
					roots[root] = hdr.Typeflag
					if hdr.Typeflag == tar.TypeDir && !glob && destIsDir {
						// A directory's contents go into a dest that
						// exists: dest keeps its own owner and mode, as
						// Docker has it.
						return nil
					}
				}
				target := copyTarget(dest, root, rel, roots[root], intoDir || glob)
				h := *hdr
				h.Name = strings.TrimPrefix(target, "/")
				if h.Name == "" {
					h.Name = "."
				}
				if h.Typeflag == tar.TypeLink {
					lroot, lrel, ok := matchSource(src, glob, path.Clean(h.Linkname), roots)
					if !ok {
						return fmt.Errorf("%s: hard link to %s, which is not copied: %w", n, h.Linkname, errdefs.ErrInvalidArgument)
					}
					h.Linkname = strings.TrimPrefix(copyTarget(dest, lroot, lrel, roots[lroot], intoDir || glob), "/")
				}
				h.Uid, h.Gid, h.Uname, h.Gname = int(u.UID), int(u.GID), "", ""
				if mode >= 0 && h.Typeflag != tar.TypeSymlink {
					h.Mode = h.Mode&^0o7777 | mode
				}
				if err := tw.WriteHeader(&h); err != nil {
					return err
				}
				copied++
				_, err := io.Copy(tw, body)
				return err
			})
			if err == nil {
				err = tw.Close()
			}
			pw.CloseWithError(err)
		}()
		err = template.Extract(ctx, merged, pr)
		pr.CloseWithError(err)
		if err != nil {
			return err
		}
		if copied == 0 {
			return fmt.Errorf("COPY %s: no such file in the uploaded files: %w", step.Args[0], errdefs.ErrInvalidArgument)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	b.logf(st.bd, "debug", name, "copied %d entries to %s", copied, dest)
	return layer.ID, nil
}

// matchSource tells whether archive entry n is copied for source src (a
// path, or a glob when glob): it returns the matched source it is under
// and its path below it ("" for the source itself).
func matchSource(src string, glob bool, n string, roots map[string]byte) (root, rel string, ok bool) {
	if !glob {
		if n == src || src == "." {
			if src == "." && n != "." {
				return ".", n, true
			}
			return src, "", true
		}
		if r, ok := strings.CutPrefix(n, src+"/"); ok {
			return src, r, true
		}
		return "", "", false
	}
	if m, _ := path.Match(src, n); m {
		return n, "", true
	}
	for r := range roots {
		if rest, ok := strings.CutPrefix(n, r+"/"); ok {
			return r, rest, true
		}
	}
	return "", "", false
}

// copyTarget is where rel under the matched source root (of tar type
// typ) goes: a directory's contents go into dest; a file goes to dest, or
// into it when dest is a directory.
func copyTarget(dest, root, rel string, typ byte, intoDir bool) string {
	if typ == tar.TypeDir {
		return path.Join(dest, rel)
	}
	if intoDir {
		return path.Join(dest, path.Base(root))
	}
	return dest
}

// verifyFiles checks that the archive uploaded under a COPY step's
// FilesHash holds what the hash says, where the hash can say it: when it
// is the SHA-256 of the archive's bytes (as Hutch's own clients make it),
// or when it is E2B's hash of the step and its files (the SDKs') and the
// archive holds no directory (E2B's hash covers a directory's size on the
// client's disk, which a tar does not carry). An archive that matches
// neither where one could be checked was not what the client hashed.
func verifyFiles(step template.Step, archivePath string) error {
	f, err := os.Open(archivePath)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	if hex.EncodeToString(h.Sum(nil)) == step.FilesHash {
		return nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	e2b := sha256.New()
	fmt.Fprintf(e2b, "COPY %s %s", step.Args[0], step.Args[1])
	checkable := true
	if _, err := readFiles(f, func(hdr *tar.Header, body io.Reader) error {
		name := strings.TrimSuffix(strings.TrimPrefix(hdr.Name, "./"), "/")
		var mode int64
		switch hdr.Typeflag {
		case tar.TypeReg:
			mode = unix.S_IFREG
		case tar.TypeSymlink:
			mode = unix.S_IFLNK
		default:
			checkable = false
			return nil
		}
		io.WriteString(e2b, name)
		io.WriteString(e2b, strconv.FormatInt(mode|hdr.Mode&0o7777, 10))
		if hdr.Typeflag == tar.TypeSymlink {
			io.WriteString(e2b, strconv.Itoa(len(hdr.Linkname)))
			io.WriteString(e2b, hdr.Linkname)
			return nil
		}
		io.WriteString(e2b, strconv.FormatInt(hdr.Size, 10))
		_, err := io.Copy(e2b, body)
		return err
	}); err != nil {
		return fmt.Errorf("the uploaded files of COPY %s: %w", step.Args[0], err)
	}
	if checkable && hex.EncodeToString(e2b.Sum(nil)) != step.FilesHash {
		return fmt.Errorf("the files uploaded for COPY %s do not match their hash %s (changed during the upload?): %w", step.Args[0], step.FilesHash, errdefs.ErrInvalidArgument)
	}
	return nil
}

// maxAccountFile bounds /etc/passwd and /etc/group as a build reads them.
const maxAccountFile = 4 << 20

// lookupUser resolves user against the accounts of the root filesystem at
// root, which the template's author made: its /etc/passwd and /etc/group
// are opened inside root (a symlink there cannot lead to the host's), as
// regular files only (a FIFO would hang the build), of bounded size.
func lookupUser(root, user string) (*passwd.User, error) {
	tmp, err := os.MkdirTemp("", "hutch-accounts-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if err := os.Mkdir(filepath.Join(tmp, "etc"), 0o700); err != nil {
		return nil, err
	}
	for _, name := range []string{"etc/passwd", "etc/group"} {
		b, err := readInRoot(root, name, maxAccountFile)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("/%s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(tmp, name), b, 0o600); err != nil {
			return nil, err
		}
	}
	return passwd.Lookup(tmp, user)
}

// readInRoot reads the regular file name under root, resolving every
// symlink inside root (openat2 RESOLVE_IN_ROOT, through
// filepath-securejoin), at most max bytes.
func readInRoot(root, name string, max int64) ([]byte, error) {
	h, err := pathrs.OpenInRoot(root, name)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	f, err := pathrs.Reopen(h, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file: %w", errdefs.ErrInvalidArgument)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("larger than %d bytes: %w", max, errdefs.ErrInvalidArgument)
	}
	return b, nil
}
