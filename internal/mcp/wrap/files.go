package wrap

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/cli/archive"
	"github.com/hutch-sandbox/hutch/internal/cli/shell"
	"github.com/hutch-sandbox/hutch/sdk"
)

// File is a local file or directory to upload into the sandbox before
// the server starts.
type File struct {
	// Local is the path here.
	Local string
	// Remote is the path in the sandbox, relative to the user's home
	// unless absolute. A file goes to Remote, or into it when Remote
	// ends in "/"; a directory's contents go into directory Remote (made
	// if missing).
	Remote string
}

// ParseFile parses LOCAL:REMOTE, split at the last colon (so REMOTE
// cannot hold one, LOCAL can).
func ParseFile(spec string) (File, error) {
	i := strings.LastIndexByte(spec, ':')
	if i <= 0 || i == len(spec)-1 {
		return File{}, fmt.Errorf("--file %q: want LOCAL:REMOTE", spec)
	}
	return File{Local: spec[:i], Remote: spec[i+1:]}, nil
}

// upload is a File checked: what it is here.
type upload struct {
	File
	info fs.FileInfo
}

// checkFiles stats every local path (following symlinks): each must be a
// regular file or a directory.
func checkFiles(files []File) ([]upload, error) {
	var out []upload
	for _, f := range files {
		fi, err := os.Stat(f.Local)
		if err != nil {
			return nil, fmt.Errorf("--file %s:%s: %w", f.Local, f.Remote, err)
		}
		if !fi.Mode().IsRegular() && !fi.IsDir() {
			return nil, fmt.Errorf("--file %s:%s: not a regular file or a directory", f.Local, f.Remote)
		}
		out = append(out, upload{File: f, info: fi})
	}
	return out, nil
}

// upload copies the files into the sandbox as the server's user: files
// through the files API, directories as tar streams extracted in the
// sandbox (which needs tar there). Then one command gives files their
// local permission bits and extracts the trees.
func (s *session) upload(ctx context.Context, sbx *sdk.Sandbox, uploads []upload) error {
	var script []string
	for _, u := range uploads {
		remote := u.Remote
		if u.info.IsDir() {
			tmp, err := s.uploadTree(ctx, sbx, u.Local)
			if err != nil {
				return err
			}
			script = append(script, fmt.Sprintf("mkdir -p -- %[1]s && tar -x -p --no-same-owner -f %[2]s -C %[1]s; s=$?; rm -f -- %[2]s; [ $s = 0 ] || exit $s",
				shell.Quote(remote), shell.Quote(tmp)))
			continue
		}
		if strings.HasSuffix(remote, "/") {
			remote += filepath.Base(u.Local)
		}
		if err := s.uploadFile(ctx, sbx, u.Local, remote); err != nil {
			return err
		}
		if perm := u.info.Mode().Perm(); perm != 0o644 {
			script = append(script, fmt.Sprintf("chmod %04o -- %s || exit", perm, shell.Quote(remote)))
		}
	}
	if len(script) == 0 {
		return nil
	}
	// The sandbox's root may have replaced chmod: only a bounded part of
	// what the script prints is kept.
	_, err := sbx.Commands.Run(ctx, strings.Join(script, "\n"), &sdk.RunOptions{User: s.o.User, Timeout: sdk.NoTimeout, MaxOutput: 64 << 10})
	var ce *sdk.CommandExitError
	if errors.As(err, &ce) {
		msg := oneLine(ce.Stderr)
		if msg == "" {
			msg = ce.Error()
		}
		return fmt.Errorf("placing the uploaded files: %s", msg)
	}
	return err
}

func (s *session) uploadFile(ctx context.Context, sbx *sdk.Sandbox, local, remote string) error {
	f, err := os.Open(local)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := sbx.Files.WriteStream(ctx, remote, f, &sdk.WriteOptions{User: s.o.User}); err != nil {
		return fmt.Errorf("uploading %s to %s: %w", local, remote, err)
	}
	return nil
}

var errUploadEnded = errors.New("the upload ended")

// uploadTree writes directory local as a tar stream (its contents at the
// top) to a temporary file in the sandbox and returns its path.
func (s *session) uploadTree(ctx context.Context, sbx *sdk.Sandbox, local string) (string, error) {
	var b [8]byte
	rand.Read(b[:])
	tmp := "/tmp/.hutch-mcp-wrap-" + hex.EncodeToString(b[:]) + ".tar"
	pr, pw := io.Pipe()
	packed := make(chan error, 1)
	go func() {
		err := archive.Pack(pw, local, ".")
		pw.CloseWithError(err)
		packed <- err
	}()
	_, err := sbx.Files.WriteStream(ctx, tmp, pr, &sdk.WriteOptions{User: s.o.User})
	pr.CloseWithError(errUploadEnded)
	switch perr := <-packed; {
	case perr != nil && !errors.Is(perr, errUploadEnded):
		return "", fmt.Errorf("packing %s: %w", local, perr)
	case err != nil:
		return "", fmt.Errorf("uploading %s: %w", local, err)
	}
	return tmp, nil
}
