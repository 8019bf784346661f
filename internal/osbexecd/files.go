package osbexecd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/bmatcuk/doublestar/v4"

	fspb "github.com/hutch-sandbox/hutch/api/gen/filesystem"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// fileInfo is execd's FileInfo.
type fileInfo struct {
	Path       string    `json:"path"`
	Type       string    `json:"type"`
	Size       int64     `json:"size"`
	ModifiedAt time.Time `json:"modified_at"`
	CreatedAt  time.Time `json:"created_at"`
	Owner      string    `json:"owner"`
	Group      string    `json:"group"`
	Mode       int       `json:"mode"`
}

// toFileInfo converts envd's entry. A symlink is reported as itself (type
// symlink, mode 777), as execd's lstat does, where envd describes its
// target. envd knows no creation time: created_at is the modification
// time.
func toFileInfo(e *fspb.EntryInfo) fileInfo {
	fi := fileInfo{Path: e.GetPath(), Size: e.GetSize(), Owner: e.GetOwner(), Group: e.GetGroup()}
	fi.ModifiedAt = e.GetModifiedTime().AsTime().UTC()
	fi.CreatedAt = fi.ModifiedAt
	mode := e.GetMode() & 0o777
	switch {
	case e.SymlinkTarget != nil:
		fi.Type, mode = "symlink", 0o777
	case e.GetType() == fspb.FileType_FILE_TYPE_FILE:
		fi.Type = "file"
	case e.GetType() == fspb.FileType_FILE_TYPE_DIRECTORY:
		fi.Type = "directory"
	default:
		fi.Type = "other"
	}
	fi.Mode, _ = strconv.Atoi(strconv.FormatUint(uint64(mode), 8))
	return fi
}

// isDir reports whether e is a directory itself, not a link to one.
func isDir(e *fspb.EntryInfo) bool {
	return e.SymlinkTarget == nil && e.GetType() == fspb.FileType_FILE_TYPE_DIRECTORY
}

// listDir is filesystem.ListDir of path down to depth levels.
func (ec *envdClient) listDir(ctx context.Context, path string, depth uint32) ([]*fspb.EntryInfo, error) {
	if err := ec.c.holdListing(ctx); err != nil {
		return nil, err
	}
	// An envd that stops answering (its sandbox's root stopped it) holds
	// the share for at most this long.
	ctx, cancel := context.WithTimeout(ctx, listingDeadline)
	defer cancel()
	req := connect.NewRequest(&fspb.ListDirRequest{Path: path, Depth: depth})
	ec.header(req.Header())
	resp, err := ec.fs().ListDir(ctx, req)
	if err != nil {
		if connect.CodeOf(err) == connect.CodeResourceExhausted {
			return nil, &apiError{http.StatusRequestEntityTooLarge, codeTooLarge, fmt.Sprintf("the listing of %s is larger than %d bytes; narrow the path", path, maxListingBytes)}
		}
		return nil, classify("list "+path, err)
	}
	return resp.Msg.GetEntries(), nil
}

// filesInfo is GET /files/info?path=...: a map from each path as given to
// its FileInfo; a missing path is a 404.
func (h *Handler) filesInfo(w http.ResponseWriter, r *http.Request, c *call) {
	paths, err := queryPaths(r)
	if err != nil {
		fail(w, err)
		return
	}
	ec := h.client(c, "")
	out := make(map[string]fileInfo, len(paths))
	for _, p := range paths {
		e, err := ec.stat(r.Context(), p)
		if err != nil {
			fail(w, err)
			return
		}
		out[p] = toFileInfo(e)
	}
	writeJSON(w, out)
}

// removeFiles is DELETE /files?path=...: removes files (links, not their
// targets); a missing path is fine, a directory is refused (that is DELETE
// /directories). Every path is checked before any is removed.
func (h *Handler) removeFiles(w http.ResponseWriter, r *http.Request, c *call) {
	paths, err := queryPaths(r)
	if err != nil {
		fail(w, err)
		return
	}
	ec := h.client(c, "")
	var remove []string
	for _, p := range paths {
		e, err := ec.stat(r.Context(), p)
		if errors.Is(err, errdefs.ErrNotFound) {
			continue
		}
		if err != nil {
			fail(w, err)
			return
		}
		if isDir(e) {
			fail(w, badRequest("%s is a directory: remove it with DELETE /directories", p))
			return
		}
		remove = append(remove, e.GetPath())
	}
	for _, p := range remove {
		if err := ec.remove(r.Context(), p); err != nil {
			fail(w, err)
			return
		}
	}
	okEmpty(w)
}

// remove is filesystem.Remove: path and everything below it.
func (ec *envdClient) remove(ctx context.Context, path string) error {
	req := connect.NewRequest(&fspb.RemoveRequest{Path: path})
	ec.header(req.Header())
	_, err := ec.fs().Remove(ctx, req)
	return classify("remove "+path, err)
}

// maxSearchDepth bounds how deep a search descends; deeper trees are not
// made by hand.
const maxSearchDepth = 1024

// maxSearchResults bounds a search's answer.
const maxSearchResults = 10000

// searchFiles is GET /files/search?path=&pattern=: the files (everything
// but directories) under path whose name — or path below path — matches
// the glob pattern (doublestar syntax, as execd's; default "**"). Links
// are reported, not followed.
func (h *Handler) searchFiles(w http.ResponseWriter, r *http.Request, c *call) {
	q := r.URL.Query()
	root := q.Get("path")
	if root == "" {
		fail(w, missingQuery("path"))
		return
	}
	if err := checkPath(root); err != nil {
		fail(w, err)
		return
	}
	pattern := q.Get("pattern")
	if pattern == "" {
		pattern = "**"
	}
	if !doublestar.ValidatePattern(pattern) {
		fail(w, badRequest("invalid glob pattern %q", pattern))
		return
	}
	ec := h.client(c, "")
	top, err := ec.stat(r.Context(), root)
	if err != nil {
		fail(w, err)
		return
	}
	entries := []*fspb.EntryInfo{top}
	base := top.GetPath()
	if top.GetType() == fspb.FileType_FILE_TYPE_DIRECTORY {
		if entries, err = ec.listDir(r.Context(), root, maxSearchDepth); err != nil {
			fail(w, err)
			return
		}
	}
	found := []fileInfo{}
	for _, e := range entries {
		if isDir(e) {
			continue
		}
		name := e.GetName()
		rel := strings.TrimPrefix(strings.TrimPrefix(e.GetPath(), base), "/")
		if !doublestar.MatchUnvalidated(pattern, name) && !doublestar.MatchUnvalidated(pattern, rel) {
			continue
		}
		if len(found) == maxSearchResults {
			fail(w, &apiError{http.StatusRequestEntityTooLarge, codeTooLarge, fmt.Sprintf("more than %d files match; narrow the path or the pattern", maxSearchResults)})
			return
		}
		found = append(found, toFileInfo(e))
	}
	writeJSON(w, found)
}

// renameItem is execd's RenameFileItem.
type renameItem struct {
	Src  string `json:"src"`
	Dest string `json:"dest"`
}

// moveFiles is POST /files/mv [{src, dest}]: renames each, creating the
// destination's parents; a missing source is 404 and an existing
// destination 409, both found before anything moves.
func (h *Handler) moveFiles(w http.ResponseWriter, r *http.Request, c *call) {
	var items []renameItem
	if err := h.decodeJSON(w, r, &items, false); err != nil {
		fail(w, err)
		return
	}
	ec := h.client(c, "")
	for _, it := range items {
		if it.Src == "" || it.Dest == "" {
			fail(w, badRequest("invalid request: src and dest are required"))
			return
		}
		if err := errors.Join(checkPath(it.Src), checkPath(it.Dest)); err != nil {
			fail(w, err)
			return
		}
	}
	for _, it := range items {
		if _, err := ec.stat(r.Context(), it.Src); err != nil {
			fail(w, err)
			return
		}
		exists, err := ec.exists(r.Context(), it.Dest)
		if err != nil {
			fail(w, err)
			return
		}
		if exists {
			fail(w, &apiError{http.StatusConflict, codeAlreadyExists, fmt.Sprintf("destination path already exists: %s", it.Dest)})
			return
		}
	}
	for _, it := range items {
		req := connect.NewRequest(&fspb.MoveRequest{Source: it.Src, Destination: it.Dest})
		ec.header(req.Header())
		if _, err := ec.fs().Move(r.Context(), req); err != nil {
			fail(w, classify("move "+it.Src, err))
			return
		}
	}
	okEmpty(w)
}

// replaceItem is execd's ReplaceFileContentItem.
type replaceItem struct {
	Old *string `json:"old"`
	New *string `json:"new"`
}

// replaceResult is execd's ReplaceFileContentResult.
type replaceResult struct {
	ReplacedCount int `json:"replacedCount"`
}

// replaceContent is POST /files/replace {"<path>": {old, new}}: replaces
// every occurrence of old in each file, keeping its mode and owner. Every
// file is read and checked before any is written; each is written
// atomically. With ?verbose=true the answer counts the replacements.
//
// The files pass through the host: what they are now is bounded by
// MaxReplaceBytes for the request together, and so is what they become
// (a one-byte old and a long new multiply a file). The result is streamed
// to envd as it is made, never built, and the files read by all requests
// at once are bounded by replaceInFlight.
func (h *Handler) replaceContent(w http.ResponseWriter, r *http.Request, c *call) {
	// A sandbox whose envd stops answering holds its share of the
	// server's replace memory for at most this long.
	ctx, cancel := context.WithTimeout(r.Context(), replaceDeadline)
	defer cancel()
	r = r.WithContext(ctx)
	var items map[string]replaceItem
	if err := h.decodeJSON(w, r, &items, false); err != nil {
		fail(w, err)
		return
	}
	paths := make([]string, 0, len(items))
	for p, it := range items {
		if err := checkPath(p); err != nil {
			fail(w, err)
			return
		}
		if it.Old == nil || it.New == nil {
			fail(w, badRequest("invalid request: %s needs both old and new", p))
			return
		}
		if *it.Old == "" {
			fail(w, badRequest("old content must not be empty (%s)", p))
			return
		}
		paths = append(paths, p)
	}
	sort.Strings(paths)
	ec := h.client(c, "")
	limit := h.opts.MaxReplaceBytes
	tooLarge := &apiError{http.StatusRequestEntityTooLarge, codeTooLarge, fmt.Sprintf("the files to replace in are larger than %d bytes together", limit)}

	entries := make([]*fspb.EntryInfo, len(paths))
	var size int64
	for i, p := range paths {
		e, err := ec.stat(r.Context(), p)
		if err != nil {
			fail(w, err)
			return
		}
		if e.SymlinkTarget == nil && e.GetType() != fspb.FileType_FILE_TYPE_FILE {
			fail(w, badRequest("%s is not a regular file", p))
			return
		}
		entries[i] = e
		if size += e.GetSize(); size > limit {
			fail(w, tooLarge)
			return
		}
	}
	// Hold the host's memory for the files as they are now; one that
	// grew since its stat is read up to what is held, no further.
	held := max(size, 1)
	if err := h.replaceMem.acquire(r.Context(), c.envd.Tenant, held); err != nil {
		if r.Context().Err() == nil {
			w.Header().Set("Retry-After", "5")
			fail(w, err)
		}
		return
	}
	defer h.replaceMem.release(c.envd.Tenant, held)

	type change struct {
		path  string // resolved
		owner string
		data  []byte
		old   []byte
		new   []byte
		size  int64 // after the replacement
	}
	var changes []change
	results := make(map[string]replaceResult, len(paths))
	left, total := held, int64(0)
	for i, p := range paths {
		data, err := ec.readFile(r.Context(), p, left)
		if err != nil {
			var ae *apiError
			if errors.As(err, &ae) && ae.status == http.StatusRequestEntityTooLarge {
				err = &apiError{http.StatusConflict, codeRuntimeError, fmt.Sprintf("%s grew while it was being read; try again", p)}
			}
			fail(w, err)
			return
		}
		left -= int64(len(data))
		old, repl := []byte(*items[p].Old), []byte(*items[p].New)
		n := bytes.Count(data, old)
		results[p] = replaceResult{ReplacedCount: n}
		if n == 0 {
			continue
		}
		after := int64(len(data)) + int64(n)*(int64(len(repl))-int64(len(old)))
		if total += after; total > limit {
			fail(w, badRequest("the files would be %d bytes together after the replacement, more than the %d bytes one request may write", total, limit))
			return
		}
		owner, _ := ownerText(entries[i].GetOwner(), entries[i].GetGroup())
		changes = append(changes, change{path: entries[i].GetPath(), owner: owner, data: data, old: old, new: repl, size: after})
	}
	var ops []permOp
	for _, ch := range changes {
		// envd's write keeps the mode and gives the file to the writer;
		// the owner it had is put back below.
		open := func() io.Reader { return &replacer{data: ch.data, old: ch.old, new: ch.new} }
		if err := ec.writeFile(r.Context(), ch.path, ch.size, open); err != nil {
			fail(w, err)
			return
		}
		ops = append(ops, permOp{path: ch.path, owner: ch.owner})
	}
	if err := h.applyPerms(r.Context(), c, ops); err != nil {
		fail(w, fmt.Errorf("the content was replaced, but restoring the owner failed: %w", err))
		return
	}
	if r.URL.Query().Get("verbose") == "true" {
		writeJSON(w, results)
		return
	}
	okEmpty(w)
}

// replacer reads data with every old replaced by new, as bytes.ReplaceAll
// would make it (matches found left to right, not overlapping), without
// building the result.
type replacer struct {
	data, old, new []byte
	out            []byte // what is ready to be read
	pendingNew     bool   // new comes after out
	done           bool
}

func (rp *replacer) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if len(rp.out) == 0 {
			switch {
			case rp.pendingNew:
				rp.out, rp.pendingNew = rp.new, false
			case rp.done:
				if n == 0 {
					return 0, io.EOF
				}
				return n, nil
			default:
				i := bytes.Index(rp.data, rp.old)
				if i < 0 {
					rp.out, rp.data, rp.done = rp.data, nil, true
				} else {
					rp.out, rp.data, rp.pendingNew = rp.data[:i], rp.data[i+len(rp.old):], true
				}
			}
			continue
		}
		c := copy(p[n:], rp.out)
		rp.out = rp.out[c:]
		n += c
	}
	return n, nil
}

// chmodFiles is POST /files/permissions {"<path>": {owner, group, mode}}:
// every entry and path is checked before anything changes.
func (h *Handler) chmodFiles(w http.ResponseWriter, r *http.Request, c *call) {
	var items map[string]permission
	if err := h.decodeJSON(w, r, &items, false); err != nil {
		fail(w, err)
		return
	}
	ops, err := h.resolvePerms(r.Context(), c, items)
	if err != nil {
		fail(w, err)
		return
	}
	if err := h.applyPerms(r.Context(), c, ops); err != nil {
		fail(w, err)
		return
	}
	okEmpty(w)
}

// resolvePerms checks items and returns their ops on the paths envd
// resolves them to, each path having to exist.
func (h *Handler) resolvePerms(ctx context.Context, c *call, items map[string]permission) ([]permOp, error) {
	ec, checkNames := h.client(c, ""), h.namesChecker(ctx, c)
	paths := make([]string, 0, len(items))
	ops := make(map[string]permOp, len(items))
	for p, perm := range items {
		if err := checkPath(p); err != nil {
			return nil, err
		}
		op, err := checkPermission(p, perm)
		if err != nil {
			return nil, err
		}
		if err := checkNames(perm.Owner, perm.Group); err != nil {
			return nil, err
		}
		paths = append(paths, p)
		ops[p] = op
	}
	sort.Strings(paths)
	out := make([]permOp, 0, len(paths))
	for _, p := range paths {
		e, err := ec.stat(ctx, p)
		if err != nil {
			return nil, err
		}
		op := ops[p]
		op.path = e.GetPath()
		out = append(out, op)
	}
	return out, nil
}
