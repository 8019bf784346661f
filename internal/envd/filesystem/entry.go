package filesystem

import (
	"bufio"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/hutch-sandbox/hutch/api/gen/filesystem"
)

// metadataPrefix marks the xattrs that hold the user metadata the SDK sets
// with X-Metadata-* headers on upload (§3.7).
const metadataPrefix = "user.e2b."

// idNames maps uids and gids to the names in the sandbox's /etc/passwd and
// /etc/group. It is loaded once per request so a ListDir of many entries
// reads the files once, and each request still sees users added since.
type idNames struct {
	users, groups map[uint32]string
}

func loadIDNames() *idNames {
	return &idNames{users: idFile("/etc/passwd"), groups: idFile("/etc/group")}
}

// idFile reads name:x:id:... lines; both passwd and group put the id third.
func idFile(path string) map[uint32]string {
	m := map[uint32]string{}
	f, err := os.Open(path)
	if err != nil {
		return m
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 3 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		id, err := strconv.ParseUint(fields[2], 10, 32)
		if err != nil {
			continue
		}
		if _, dup := m[uint32(id)]; !dup { // first entry wins, like getpwuid
			m[uint32(id)] = fields[0]
		}
	}
	return m
}

func (n *idNames) user(uid uint32) string  { return nameOr(n.users, uid) }
func (n *idNames) group(gid uint32) string { return nameOr(n.groups, gid) }

func nameOr(m map[uint32]string, id uint32) string {
	if name, ok := m[id]; ok {
		return name
	}
	return strconv.FormatUint(uint64(id), 10)
}

// statEntry builds the EntryInfo of path without following a final symlink.
func statEntry(path string, names *idNames) (*pb.EntryInfo, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	return entryFromInfo(path, fi, names), nil
}

// entryFromInfo builds the EntryInfo of path from its lstat result fi.
// Following the reference envd, a symlink keeps its own size, permissions
// string and owner, but type and mode describe the target (UNSPECIFIED and 0
// when the link dangles) and symlinkTarget is the resolved target path.
func entryFromInfo(path string, fi fs.FileInfo, names *idNames) *pb.EntryInfo {
	e := &pb.EntryInfo{
		Name:         filepath.Base(path),
		Path:         path,
		Size:         fi.Size(),
		Permissions:  fi.Mode().String(),
		ModifiedTime: timestamppb.New(fi.ModTime()),
		Type:         fileType(fi.Mode()),
		Mode:         uint32(fi.Mode().Perm()),
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.Owner = names.user(st.Uid)
		e.Group = names.group(st.Gid)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target := symlinkTarget(path)
		e.SymlinkTarget = &target
		e.Type, e.Mode = pb.FileType_FILE_TYPE_UNSPECIFIED, 0
		if tfi, err := os.Stat(path); err == nil {
			e.Type, e.Mode = fileType(tfi.Mode()), uint32(tfi.Mode().Perm())
		}
	}
	e.Metadata = readMetadata(path)
	return e
}

// symlinkTarget is the fully resolved target of the link at path, or, for a
// dangling link, its raw target made absolute, so clients always get a path
// they can pass back to the service.
func symlinkTarget(path string) string {
	if t, err := filepath.EvalSymlinks(path); err == nil {
		return t
	}
	t, err := os.Readlink(path)
	if err != nil {
		return ""
	}
	if !filepath.IsAbs(t) {
		t = filepath.Join(filepath.Dir(path), t)
	}
	return filepath.Clean(t)
}

func fileType(m fs.FileMode) pb.FileType {
	switch {
	case m.IsDir():
		return pb.FileType_FILE_TYPE_DIRECTORY
	case m&fs.ModeSymlink != 0:
		return pb.FileType_FILE_TYPE_SYMLINK
	case m.IsRegular():
		return pb.FileType_FILE_TYPE_FILE
	default:
		// Devices, sockets and pipes have no FileType; the reference reports
		// them as UNSPECIFIED too, and the SDK then leaves them out of lists.
		return pb.FileType_FILE_TYPE_UNSPECIFIED
	}
}

// readMetadata returns the user.e2b.* xattrs of path keyed without the
// prefix, or nil when there are none or the filesystem has no xattrs (the
// metadata is optional, so failures here never fail the request).
func readMetadata(path string) map[string]string {
	size, err := unix.Llistxattr(path, nil)
	if err != nil || size <= 0 {
		return nil
	}
	buf := make([]byte, size)
	size, err = unix.Llistxattr(path, buf)
	if err != nil {
		return nil
	}
	var md map[string]string
	for _, name := range strings.Split(string(buf[:size]), "\x00") {
		key, ok := strings.CutPrefix(name, metadataPrefix)
		if !ok || key == "" {
			continue
		}
		val, err := getxattr(path, name)
		if err != nil {
			continue
		}
		if md == nil {
			md = map[string]string{}
		}
		md[key] = val
	}
	return md
}

func getxattr(path, name string) (string, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Lgetxattr(path, name, buf)
		if errors.Is(err, unix.ERANGE) {
			// The value grew, or is larger than the first guess: ask its size.
			sz, err := unix.Lgetxattr(path, name, nil)
			if err != nil {
				return "", err
			}
			buf = make([]byte, sz+1)
			continue
		}
		if err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
}
