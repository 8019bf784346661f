package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/hutch-sandbox/hutch/internal/cli/archive"
	"github.com/hutch-sandbox/hutch/internal/cli/human"
	"github.com/hutch-sandbox/hutch/internal/cli/printable"
	"github.com/hutch-sandbox/hutch/internal/cli/progress"
	"github.com/hutch-sandbox/hutch/internal/cli/shell"
	"github.com/hutch-sandbox/hutch/internal/cli/sparse"
	"github.com/hutch-sandbox/hutch/sdk"
)

func newCpCmd(g *globals) *cobra.Command {
	var (
		user       string
		ignoreFree bool
	)
	cmd := &cobra.Command{
		Use:   "cp [flags] SRC DST",
		Short: "Copy files and directories between here and a sandbox (ID:PATH names the sandbox side)",
		Long: `Cp copies a file, a directory tree or a symlink between this machine and a
sandbox, as docker cp does. Exactly one of SRC and DST is ID:PATH; a
relative PATH is relative to the sandbox user's home (write a local path
with a colon as ./a:b). Where the copy lands:

- SRC a file, DST an existing directory: in it, under SRC's name.
- SRC a file, DST an existing file: DST is overwritten.
- SRC a file, DST missing: DST, whose parent must exist (an error if DST
  ends in /).
- SRC a directory, DST an existing directory: in it, under SRC's name; when
  SRC ends in /., SRC's contents go into DST itself.
- SRC a directory, DST missing: DST, as a copy of SRC (its parent must
  exist).
- SRC a directory, DST an existing file: an error.

Symlinks are copied as symlinks, targets unchanged, also when SRC is one.
Permission bits (and sticky; setuid and setgid are dropped when copying
here) and modification times are kept; what is copied belongs to the user
who copies: the sandbox user (-u) there, the caller here. Directories and
symlinks travel as a tar stream, through a temporary file in the sandbox's
/tmp. Copying here, the sandbox's /usr/bin/tar (or /bin/tar) makes it,
started directly with an empty environment, not through the user's shell
and startup files. What the sandbox sends is checked here all the same:
of what a program cp runs there prints, at most 64 KiB is kept (past it
the program is killed and the copy fails); a
copy of SRC writes only its own tree, DST/NAME (NAME: SRC's name) or the
new DST; a stream entry anywhere else (an absolute name, "..", another
name, a path through a symlink out of the tree) is refused and the copy
fails. A new tree is extracted in a temporary directory beside it and
renamed into place only once the whole stream was valid, so a failed copy
leaves nothing (into an existing tree, what came before the failure
stays, inside that tree). With SRC/. onto an existing DST, entries land in
DST itself, replacing same-named files, but DST's own mode, owner and
times are never taken from the stream.

Files copied here keep their holes: aligned 4 KiB blocks of zeros are
skipped rather than written, as cp --sparse=auto does, so a sparse file
stays sparse (a file that was not sparse may become so; its bytes are the
same). Before copying here, cp compares the apparent size of what it
copies (holes included; for a directory as du -s -b counts it, and then
the size of its tar archive) with the free space of the destination's
file system, and refuses when it is larger. The sandbox is held to the
sizes it reported: a file may bring at most its size, a directory's files
at most du's total, each plus 1 MiB and 1 % for files that grow meanwhile,
and the archive at most its size; more stops the copy ("the sandbox sent
more than the N bytes it reported"), leaving nothing of a new file or
tree. --ignore-free-space copies without these checks, for sparse files
that take less room than they seem to; if the disk fills up all the same,
cp fails and removes the file it was writing.

A progress bar shows on standard error, when it is a terminal, for
transfers over 1 MiB. Failures exit 1.`,
		Example: `  hutch cp ./src ID:/home/user/project     # ./src becomes /home/user/project (or goes in it)
  hutch cp ./src/. ID:/home/user/project   # the contents of ./src
  hutch cp ID:/tmp/report.pdf .            # into the current directory
  hutch cp -u root ./app.conf ID:/etc/app.conf`,
		Args: cobra.ExactArgs(2),
		RunE: g.remote(func(cmd *cobra.Command, args []string, c *sdk.Client) error {
			src, dst := parseCpArg(args[0]), parseCpArg(args[1])
			if src.remote == dst.remote {
				return errors.New("exactly one of SRC and DST must be ID:PATH (write a local path with a colon as ./a:b)")
			}
			id := src.id
			if dst.remote {
				id = dst.id
			}
			// Interrupted, a copy cleans up (temporary files here and in
			// the sandbox) before hutch exits.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGHUP)
			defer stop()
			sbx, err := connect(ctx, c, id)
			if err != nil {
				return err
			}
			cp := &copier{sbx: sbx, user: user, ignoreFree: ignoreFree, bars: term.IsTerminal(int(os.Stderr.Fd()))}
			if dst.remote {
				err = cp.upload(ctx, src.path, dst.path)
			} else {
				err = cp.download(ctx, src.path, dst.path)
			}
			if err != nil && ctx.Err() != nil && cmd.Context().Err() == nil {
				fmt.Fprintln(os.Stderr, "hutch: cp interrupted")
				return exitError{code: 130}
			}
			return err
		}),
	}
	cmd.Flags().StringVarP(&user, "user", "u", "", "sandbox user to act as (default: the sandbox's default user)")
	cmd.Flags().BoolVar(&ignoreFree, "ignore-free-space", false, "copy here even when the apparent size (holes included) exceeds the free space, and take whatever the sandbox sends")
	return cmd
}

// cpArg is one side of a copy.
type cpArg struct {
	id, path string
	remote   bool
}

// parseCpArg reads ID:PATH, or a local path: one without a colon, or
// whose part before the first colon is empty, contains a slash or starts
// with a dot.
func parseCpArg(s string) cpArg {
	id, p, ok := strings.Cut(s, ":")
	if !ok || id == "" || strings.ContainsRune(id, '/') || strings.HasPrefix(id, ".") {
		return cpArg{path: s}
	}
	if p == "" {
		p = "."
	}
	return cpArg{id: id, path: p, remote: true}
}

// copier copies between here and one sandbox.
type copier struct {
	sbx  *sdk.Sandbox
	user string
	// ignoreFree skips the comparison of a download's apparent size
	// with the free space here.
	ignoreFree bool
	bars       bool // progress bars on standard error
}

// remoteName names a sandbox path in messages, as ID:PATH.
func (c *copier) remoteName(p string) string { return c.sbx.ID + ":" + p }

// contentsOf reports whether p names a directory's contents (ends in /.).
func contentsOf(p string) bool { return p == "." || strings.HasSuffix(p, "/.") }

// dirSyntax reports whether p can only name a directory (ends in /).
func dirSyntax(p string) bool { return strings.HasSuffix(p, "/") }

// stat describes a sandbox path, or returns nil when nothing is there.
func (c *copier) stat(ctx context.Context, p string) (*sdk.EntryInfo, error) {
	info, err := c.sbx.Files.GetInfo(ctx, p, &sdk.FileOptions{User: c.user})
	if errors.Is(err, sdk.ErrNotFound) {
		return nil, nil
	}
	return info, err
}

// upload copies local src to sandbox path dst.
func (c *copier) upload(ctx context.Context, src, dst string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	contents := contentsOf(src)
	if contents && !fi.IsDir() {
		return fmt.Errorf("%s: not a directory", src)
	}
	to, err := c.stat(ctx, dst)
	if err != nil {
		return err
	}
	regular := fi.Mode().IsRegular()
	clean := path.Clean(dst)
	switch {
	case to != nil && to.Type == sdk.FileTypeDir:
		switch {
		case contents:
			return c.uploadTree(ctx, src, ".", clean)
		case regular:
			return c.uploadFile(ctx, src, fi, path.Join(clean, filepath.Base(src)))
		}
		return c.uploadTree(ctx, src, filepath.Base(src), clean)
	case to != nil:
		switch {
		case fi.IsDir():
			return fmt.Errorf("cannot copy directory %s onto file %s", src, c.remoteName(dst))
		case regular:
			return c.uploadFile(ctx, src, fi, clean)
		}
		return c.uploadTree(ctx, src, path.Base(clean), path.Dir(clean))
	}
	if dirSyntax(dst) && !fi.IsDir() {
		return fmt.Errorf("destination directory %s does not exist", c.remoteName(dst))
	}
	if parent, err := c.stat(ctx, path.Dir(clean)); err != nil {
		return err
	} else if parent == nil || parent.Type != sdk.FileTypeDir {
		return fmt.Errorf("destination directory %s does not exist", c.remoteName(path.Dir(clean)))
	}
	switch {
	case regular:
		return c.uploadFile(ctx, src, fi, clean)
	case contents:
		return c.uploadTree(ctx, src, ".", clean)
	}
	return c.uploadTree(ctx, src, path.Base(clean), path.Dir(clean))
}

// uploadFile streams regular file src (fi) to sandbox path target, then
// gives it src's mode if the upload did not.
func (c *copier) uploadFile(ctx context.Context, src string, fi fs.FileInfo, target string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	bar := c.bar("→ "+c.remoteName(target), fi.Size())
	_, err = c.sbx.Files.WriteStream(ctx, target, bar.reader(f), &sdk.WriteOptions{User: c.user})
	bar.finish()
	if err != nil {
		return err
	}
	info, err := c.sbx.Files.GetInfo(ctx, target, &sdk.FileOptions{User: c.user})
	if err != nil {
		return err
	}
	if info.Mode.Perm() == fi.Mode().Perm() {
		return nil
	}
	_, err = c.run(ctx, fmt.Sprintf("chmod %04o -- %s", fi.Mode().Perm(), shell.Quote(target)))
	return err
}

// uploadTree sends local src as a tar stream whose top entry is name, and
// extracts it in sandbox directory dir (made if missing).
func (c *copier) uploadTree(ctx context.Context, src, name, dir string) error {
	size, err := archive.Size(src)
	if err != nil {
		return err
	}
	tmp, err := tempName()
	if err != nil {
		return err
	}
	pr, pw := io.Pipe()
	packed := make(chan error, 1)
	go func() {
		err := archive.Pack(pw, src, name)
		pw.CloseWithError(err)
		packed <- err
	}()
	label := "→ " + c.remoteName(path.Join(dir, name))
	bar := c.bar(label, size)
	_, err = c.sbx.Files.WriteStream(ctx, tmp, bar.reader(pr), &sdk.WriteOptions{User: c.user})
	bar.finish()
	if err != nil {
		pr.CloseWithError(err)
		c.remove(ctx, tmp)
		if perr := <-packed; perr != nil && !errors.Is(perr, err) {
			return perr
		}
		return err
	}
	if err := <-packed; err != nil {
		c.remove(ctx, tmp)
		return err
	}
	_, err = c.run(ctx, fmt.Sprintf("mkdir -p -- %[1]s && tar -x -p --no-same-owner -f %[2]s -C %[1]s; s=$?; rm -f -- %[2]s; exit $s",
		shell.Quote(dir), shell.Quote(tmp)))
	return err
}

// download copies sandbox path src to local dst.
func (c *copier) download(ctx context.Context, src, dst string) error {
	from, err := c.stat(ctx, src)
	if err != nil {
		return err
	}
	if from == nil {
		return fmt.Errorf("%s: no such file or directory", c.remoteName(src))
	}
	contents := contentsOf(src)
	link := from.SymlinkTarget != ""
	dir := from.Type == sdk.FileTypeDir && !link
	regular := from.Type == sdk.FileTypeFile && !link
	if contents && from.Type != sdk.FileTypeDir {
		return fmt.Errorf("%s: not a directory", c.remoteName(src))
	}
	clean := filepath.Clean(dst)
	to, err := os.Stat(dst)
	switch {
	case err == nil && to.IsDir():
		switch {
		case contents:
			return c.downloadTree(ctx, src, from, true, clean, "")
		case regular:
			return c.downloadFile(ctx, src, from, filepath.Join(clean, path.Base(src)))
		}
		return c.downloadTree(ctx, src, from, false, clean, "")
	case err == nil:
		switch {
		case dir || contents:
			return fmt.Errorf("cannot copy directory %s onto file %s", c.remoteName(src), dst)
		case regular:
			return c.downloadFile(ctx, src, from, clean)
		}
		return c.downloadTree(ctx, src, from, false, filepath.Dir(clean), filepath.Base(clean))
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	if dirSyntax(dst) && !dir {
		return fmt.Errorf("destination directory %s does not exist", dst)
	}
	if fi, err := os.Stat(filepath.Dir(clean)); err != nil || !fi.IsDir() {
		return fmt.Errorf("destination directory %s does not exist", filepath.Dir(clean))
	}
	switch {
	case regular:
		return c.downloadFile(ctx, src, from, clean)
	case contents:
		// SRC/. onto a missing DST makes DST a copy of SRC.
		return c.downloadTree(ctx, src, from, true, filepath.Dir(clean), filepath.Base(clean))
	}
	return c.downloadTree(ctx, src, from, false, filepath.Dir(clean), filepath.Base(clean))
}

// downloadFile streams sandbox file src (described by info) to local
// target through a temporary file beside it, with src's mode and time and
// with holes where src's content has blocks of zeros. The temporary file
// is removed when the copy fails.
func (c *copier) downloadFile(ctx context.Context, src string, info *sdk.EntryInfo, target string) error {
	if fi, err := os.Lstat(target); err == nil && fi.IsDir() {
		return fmt.Errorf("cannot overwrite directory %s with a file", target)
	}
	if err := c.checkSpace(filepath.Dir(target), c.remoteName(src), info.Size); err != nil {
		return err
	}
	rc, err := c.sbx.Files.ReadStream(ctx, src, &sdk.FileOptions{User: c.user})
	if err != nil {
		return err
	}
	defer rc.Close()
	var stream io.Reader = rc
	if !c.ignoreFree {
		stream = c.bound(rc, c.remoteName(src), info.Size, info.Size+sizeSlack(info.Size))
	}
	tmp, err := os.CreateTemp(filepath.Dir(target), ".hutch-cp-*")
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	bar := c.bar("← "+c.remoteName(src), info.Size)
	_, err = sparse.Copy(tmp, bar.reader(stream))
	bar.finish()
	var (
		pe *fs.PathError
		oe *oversizeError
	)
	switch {
	case errors.As(err, &oe):
		return err
	case errors.Is(err, syscall.ENOSPC):
		return noSpace(err, filepath.Dir(target), c.remoteName(src))
	case errors.As(err, &pe):
		return fmt.Errorf("write %s: %w", target, pe.Err)
	case err != nil:
		return fmt.Errorf("read %s: %w", c.remoteName(src), err)
	}
	if err := tmp.Chmod(info.Mode.Perm()); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if !info.ModifiedTime.IsZero() {
		os.Chtimes(tmp.Name(), info.ModifiedTime, info.ModifiedTime)
	}
	if err := os.Rename(tmp.Name(), target); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	done = true
	return nil
}

// downloadTree has the sandbox tar src (described by from) into a
// temporary file, reads it and extracts it in local directory dir. With
// contents the stream holds what is in src (tar -C src .), which goes in
// dir itself, or becomes dir/rename if that is set; else the stream holds
// src itself, which becomes dir/NAME (src's name, or rename if set).
// Holes travel as holes (tar --sparse) and are kept here.
//
// The sandbox is not trusted with what lands here: archive.Unpack keeps
// every entry inside the tree asked for (dir/NAME, or dir itself for
// contents, whose own mode and times it leaves alone) and refuses the
// stream otherwise; a new dir/NAME is made only from a stream that was
// valid throughout.
func (c *copier) downloadTree(ctx context.Context, src string, from *sdk.EntryInfo, contents bool, dir, rename string) error {
	var (
		members []string // tar's -C and member arguments
		opts    archive.Options
	)
	if contents {
		members = []string{"-C", src, "."}
		if rename != "" {
			opts = archive.Options{Name: ".", Rename: rename}
		}
	} else {
		parent, name, err := c.treeName(src, from)
		if err != nil {
			return err
		}
		members = []string{"-C", parent, "./" + name}
		opts = archive.Options{Name: name, Rename: rename}
	}
	// What the sandbox reports is checked against the free space here,
	// then holds it to it: du's size bounds the files' sizes, the
	// archive's the stream.
	var reported int64
	if !c.ignoreFree {
		if size, ok := c.treeSize(ctx, src); ok {
			if err := c.checkSpace(dir, c.remoteName(src), size); err != nil {
				return err
			}
			reported, opts.MaxSize = size, size+sizeSlack(size)
		}
		// Whatever the sandbox said, the tree may take no more blocks and
		// inodes than the destination has free (an empty directory is a
		// block and an inode there, 512 bytes in the archive).
		room, err := roomIn(dir)
		if err != nil {
			return err
		}
		// A hundredth stays free, and an inode for the directory the tree
		// is built in.
		opts.MaxDisk, opts.BlockSize = max(room.bytes-room.bytes/100, 1), room.block
		if room.inodes > 0 {
			opts.MaxEntries = max(room.inodes-room.inodes/100-1, 1)
		}
	}
	tarPath, err := c.tarPath(ctx)
	if err != nil {
		return err
	}
	tmp, err := tempName()
	if err != nil {
		return err
	}
	defer c.remove(ctx, tmp)
	if _, err := c.exec(ctx, append([]string{tarPath, "-c", "--sparse", "-f", tmp}, members...)...); err != nil {
		// GNU tar exits 1 when a file changed while it read it: the
		// archive is complete, with a warning.
		var ce *sdk.CommandExitError
		if !errors.As(err, &ce) || ce.ExitCode != 1 {
			return err
		}
		fmt.Fprintf(os.Stderr, "hutch: warning: %s\n", printable.String(oneLine(ce.Stderr)))
	}
	var size int64
	info, err := c.sbx.Files.GetInfo(ctx, tmp, &sdk.FileOptions{User: c.user})
	switch {
	case err == nil:
		size = info.Size
	case !c.ignoreFree:
		return err
	}
	archived := "the archive of " + c.remoteName(src)
	if err := c.checkSpace(dir, archived, size); err != nil {
		return err
	}
	rc, err := c.sbx.Files.ReadStream(ctx, tmp, &sdk.FileOptions{User: c.user})
	if err != nil {
		return err
	}
	defer rc.Close()
	var stream io.Reader = rc
	if !c.ignoreFree {
		// The archive is complete: nothing may come past its size.
		stream = c.bound(rc, archived, size, size)
	}
	label := "← " + c.remoteName(src)
	bar := c.bar(label, size)
	err = archive.Unpack(bar.reader(stream), dir, opts)
	bar.finish()
	var oe *oversizeError
	switch {
	case errors.As(err, &oe):
		return oe
	case errors.Is(err, archive.ErrTooLarge):
		return &oversizeError{what: c.remoteName(src), reported: reported, err: err}
	case errors.Is(err, archive.ErrNoRoom):
		// Whatever du said: more entries or blocks than the destination
		// has free.
		return &cliError{fmt.Sprintf("%s does not fit in %s: %v; the copy was stopped and removed (--ignore-free-space copies without this check)", c.remoteName(src), absPath(dir), err), err}
	case err != nil && !errors.Is(err, syscall.ENOSPC):
		return fmt.Errorf("%s: %w", c.remoteName(src), err)
	}
	return noSpace(err, dir, c.remoteName(src))
}

// treeName splits sandbox path src (described by from) into the
// directory tar runs in and the name of the tree it archives. A path
// without a name of its own ("/", "..") is named by the absolute path the
// sandbox resolved it to.
func (c *copier) treeName(src string, from *sdk.EntryInfo) (parent, name string, err error) {
	usable := func(n string) bool { return n != "/" && n != "." && n != ".." }
	clean := path.Clean(src)
	if !usable(path.Base(clean)) && path.IsAbs(from.Path) {
		clean = path.Clean(from.Path)
	}
	if !usable(path.Base(clean)) {
		return "", "", fmt.Errorf("%s has no name to copy it under: copy its contents with %s/.", c.remoteName(src), c.remoteName(strings.TrimSuffix(src, "/")))
	}
	return path.Dir(clean), path.Base(clean), nil
}

// Programs a copy out of the sandbox runs there, by absolute path and
// without a shell, so that nothing of the sandbox user's (startup files,
// functions, aliases, PATH) chooses them, and through env -i, so that
// they read no variable of the sandbox's (TAR_OPTIONS). A sandbox's root
// can still replace them: what they send is checked here all the same.
var (
	envProgram  = "/usr/bin/env"
	tarPrograms = []string{"/usr/bin/tar", "/bin/tar"} // the first there
	duProgram   = "/usr/bin/du"
)

// tarPath is the first of tarPrograms the sandbox has.
func (c *copier) tarPath(ctx context.Context) (string, error) {
	for _, p := range tarPrograms {
		info, err := c.stat(ctx, p)
		if err != nil {
			return "", err
		}
		if info != nil && info.Type != sdk.FileTypeDir {
			return p, nil
		}
	}
	return "", fmt.Errorf("the sandbox has no tar (%s)", strings.Join(tarPrograms, ", "))
}

// treeSize is the apparent size of sandbox path src and what is under
// it, holes included, as du -s -b counts it; ok is false when du could
// not tell (not GNU du), and then only the archive's size is checked.
func (c *copier) treeSize(ctx context.Context, src string) (size int64, ok bool) {
	// du prints the total even when it cannot read some of the tree;
	// tar then reports what it cannot read.
	res, err := c.exec(ctx, duProgram, "-s", "-b", "--", src)
	if res == nil || errors.Is(err, sdk.ErrOutputLimit) {
		return 0, false
	}
	fields := strings.Fields(res.Stdout)
	if len(fields) == 0 {
		return 0, false
	}
	size, err = strconv.ParseInt(fields[0], 10, 64)
	return size, err == nil
}

// checkSpace refuses to copy what, size bytes (its apparent size, holes
// included), into local directory dir when dir's file system has less
// space free for the caller, unless the copy ignores free space.
func (c *copier) checkSpace(dir, what string, size int64) error {
	if c.ignoreFree {
		return nil
	}
	room, err := roomIn(dir)
	if err != nil {
		return err
	}
	free := room.bytes
	if size <= free {
		return nil
	}
	return fmt.Errorf("%s is %s, more than the %s free in %s (--ignore-free-space copies it anyway: holes are kept, so a sparse file may fit)",
		what, human.Bytes(size), human.Bytes(free), absPath(dir))
}

// room is what a local file system has free for the caller.
type room struct {
	bytes  int64 // available to unprivileged users
	inodes int64 // free; 0 also when the file system does not count them
	block  int64
}

// roomIn reports the room in directory dir's file system.
func roomIn(dir string) (room, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return room{}, &fs.PathError{Op: "statfs", Path: dir, Err: err}
	}
	r := room{bytes: int64(st.Bavail) * int64(st.Bsize), block: int64(st.Bsize)}
	if st.Files > 0 {
		r.inodes = int64(st.Ffree)
	}
	return r, nil
}

// sizeSlack is how much more than the size the sandbox reported for a
// copy out cp takes: a file may grow between the report and its copy (a
// log being written). The free space check compares the reported size
// alone, so a copy may take this much more than it checked.
func sizeSlack(reported int64) int64 { return 1<<20 + reported/100 }

// bound returns r, failing with an *oversizeError once more than limit
// bytes came: never is more than limit passed on. The sandbox reported
// that what holds reported bytes.
func (c *copier) bound(r io.Reader, what string, reported, limit int64) io.Reader {
	return &boundedReader{r: r, left: limit, err: &oversizeError{what: what, reported: reported}}
}

// boundedReader reads r until more than left bytes come, then fails with
// err.
type boundedReader struct {
	r    io.Reader
	left int64
	err  error
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, b.err
	}
	n, err := b.r.Read(p)
	if int64(n) > b.left {
		n, b.left = int(b.left), -1
		return n, b.err
	}
	b.left -= int64(n)
	return n, err
}

// oversizeError is a copy out of the sandbox stopped because the sandbox
// sent more than it had reported: what it reported made the free space
// check pass, so what it sends must keep to it.
type oversizeError struct {
	what     string
	reported int64
	err      error
}

func (e *oversizeError) Error() string {
	return fmt.Sprintf("%s: the sandbox sent more than the %d bytes it reported (it changed during the copy, or was not what the sandbox said): the copy was stopped (--ignore-free-space copies without this check)", e.what, e.reported)
}

func (e *oversizeError) Unwrap() error { return e.err }

// noSpace rewrites a full disk while copying what into local directory
// dir into what happened; other errors pass unchanged.
func noSpace(err error, dir, what string) error {
	if !errors.Is(err, syscall.ENOSPC) {
		return err
	}
	return &cliError{fmt.Sprintf("no space left in %s for %s (the file being written was removed)", absPath(dir), what), err}
}

// absPath is p made absolute for messages, or p when that fails.
func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// cpMaxOutput caps what cp keeps of the output of a program it runs in
// the sandbox: du's one line, tar's warnings, an error of chmod's. The
// sandbox's root can replace any of them with one that writes without
// end (`yes`); past the cap the program is killed and the copy fails.
const cpMaxOutput = 64 << 10

// run runs a shell command in the sandbox as the copy's user; a failure
// reads as the command's standard error.
func (c *copier) run(ctx context.Context, script string) (*sdk.CommandResult, error) {
	return inSandbox(c.sbx.Commands.Run(ctx, script, &sdk.RunOptions{User: c.user, Timeout: sdk.NoTimeout, MaxOutput: cpMaxOutput}))
}

// exec runs argv in the sandbox as the copy's user, without a shell and
// with an empty environment but LC_ALL=C (env -i); argv[0] should be an
// absolute path. A failure reads as the program's standard error.
func (c *copier) exec(ctx context.Context, argv ...string) (*sdk.CommandResult, error) {
	argv = append([]string{envProgram, "-i", "LC_ALL=C"}, argv...)
	return inSandbox(c.sbx.Commands.Exec(ctx, argv, &sdk.RunOptions{User: c.user, Timeout: sdk.NoTimeout, MaxOutput: cpMaxOutput}))
}

// inSandbox makes a command's failure read as its standard error.
func inSandbox(res *sdk.CommandResult, err error) (*sdk.CommandResult, error) {
	var ce *sdk.CommandExitError
	if errors.Is(err, sdk.ErrOutputLimit) {
		return res, &cliError{fmt.Sprintf("in the sandbox: a command printed more than %s, which no program cp runs there does; it was killed", human.Bytes(cpMaxOutput)), err}
	}
	if errors.As(err, &ce) {
		msg := oneLine(ce.Stderr)
		if msg == "" {
			msg = ce.Error()
		}
		return res, &cliError{"in the sandbox: " + msg, err}
	}
	return res, err
}

// remove deletes a temporary file in the sandbox, as best it can.
func (c *copier) remove(ctx context.Context, p string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	c.sbx.Files.Remove(ctx, p, &sdk.FileOptions{User: c.user})
}

// tempName is a fresh name for a temporary file in the sandbox.
func tempName() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "/tmp/.hutch-cp-" + hex.EncodeToString(b[:]) + ".tar", nil
}

// oneLine joins the lines of a command's output with "; ".
func oneLine(s string) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "; ")
}

// transferBar is a progress bar or nil; its methods do nothing on nil.
type transferBar struct{ *progress.Bar }

// bar returns a progress bar for a transfer of size bytes when bars are on
// and the transfer is large enough, else nil.
func (c *copier) bar(label string, size int64) *transferBar {
	if !c.bars || size < progress.Threshold {
		return nil
	}
	return &transferBar{progress.New(os.Stderr, label, size)}
}

func (b *transferBar) reader(r io.Reader) io.Reader {
	if b == nil {
		return r
	}
	return b.Reader(r)
}

func (b *transferBar) finish() {
	if b != nil {
		b.Finish()
	}
}
