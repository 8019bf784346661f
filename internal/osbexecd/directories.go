package osbexecd

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"sort"
	"strconv"

	"connectrpc.com/connect"

	fspb "github.com/hutch-sandbox/hutch/api/gen/filesystem"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// maxListDepth bounds GET /directories/list's depth.
const maxListDepth = 64

// makeDirs is POST /directories {"<path>": {owner, group, mode}}: mkdir -p
// for each, as execd: the directories it creates get the owner and group,
// the requested one the mode too; an existing directory is left as it is.
// Every entry is checked before any directory is made.
func (h *Handler) makeDirs(w http.ResponseWriter, r *http.Request, c *call) {
	var items map[string]permission
	if err := h.decodeJSON(w, r, &items, false); err != nil {
		fail(w, err)
		return
	}
	paths := make([]string, 0, len(items))
	checkNames := h.namesChecker(r.Context(), c)
	for p, perm := range items {
		if err := checkPath(p); err != nil {
			fail(w, err)
			return
		}
		if _, err := checkPermission(p, perm); err != nil {
			fail(w, err)
			return
		}
		if err := checkNames(perm.Owner, perm.Group); err != nil {
			fail(w, err)
			return
		}
		paths = append(paths, p)
	}
	sort.Strings(paths)
	ec := h.client(c, "")
	type plan struct {
		path    string
		perm    permission
		created []string // the directories mkdir -p will make, top first
	}
	var plans []plan
	for _, p := range paths {
		created, err := missingDirs(r.Context(), ec, p)
		if err != nil {
			fail(w, err)
			return
		}
		plans = append(plans, plan{path: p, perm: items[p], created: created})
	}
	var ops []permOp
	for _, pl := range plans {
		if len(pl.created) == 0 {
			continue
		}
		req := connect.NewRequest(&fspb.MakeDirRequest{Path: pl.path})
		ec.header(req.Header())
		resp, err := ec.fs().MakeDir(r.Context(), req)
		if err != nil && connect.CodeOf(err) != connect.CodeAlreadyExists {
			fail(w, classify("make directory "+pl.path, err))
			return
		}
		target := pl.created[len(pl.created)-1]
		if resp != nil {
			target = resp.Msg.GetEntry().GetPath()
		}
		op, _ := checkPermission(target, pl.perm) // checked above
		for _, d := range pl.created[:len(pl.created)-1] {
			ops = append(ops, permOp{path: d, owner: op.owner})
		}
		ops = append(ops, op)
	}
	if err := h.applyPerms(r.Context(), c, ops); err != nil {
		fail(w, fmt.Errorf("the directories were made, but setting their owner or mode failed: %w", err))
		return
	}
	okEmpty(w)
}

// missingDirs returns the directories mkdir -p p would make, top first, as
// absolute paths: none when p is a directory already; an existing
// non-directory on the way is a 400.
func missingDirs(ctx context.Context, ec *envdClient, p string) ([]string, error) {
	var missing []string
	cur := p
	for {
		e, err := ec.stat(ctx, cur)
		if err == nil {
			if e.GetType() != fspb.FileType_FILE_TYPE_DIRECTORY {
				return nil, badRequest("%s exists and is not a directory", e.GetPath())
			}
			// Name the missing ones below the resolved existing one.
			base := e.GetPath()
			out := make([]string, len(missing))
			for i := range missing {
				base = path.Join(base, missing[len(missing)-1-i])
				out[i] = base
			}
			return out, nil
		}
		if !errors.Is(err, errdefs.ErrNotFound) {
			return nil, err
		}
		// A relative path ends at "." (or "~"), which envd resolves to
		// the user's home.
		parent := path.Dir(cur)
		if parent == cur || cur == "~" {
			return nil, fmt.Errorf("make directory %s: %s does not exist: %w", p, cur, errdefs.ErrNotFound)
		}
		missing = append(missing, path.Base(cur))
		cur = parent
	}
}

// removeDirs is DELETE /directories?path=...: rm -rf each (a missing one
// is fine).
func (h *Handler) removeDirs(w http.ResponseWriter, r *http.Request, c *call) {
	paths, err := queryPaths(r)
	if err != nil {
		fail(w, err)
		return
	}
	ec := h.client(c, "")
	for _, p := range paths {
		if err := ec.remove(r.Context(), p); err != nil {
			fail(w, err)
			return
		}
	}
	okEmpty(w)
}

// listDirectory is GET /directories/list?path=&depth=: the entries below
// path down to depth levels (default 1), each directory's in name order
// and followed by its own; links are reported, not followed, and path
// itself may not be one.
func (h *Handler) listDirectory(w http.ResponseWriter, r *http.Request, c *call) {
	q := r.URL.Query()
	p := q.Get("path")
	if p == "" {
		fail(w, missingQuery("path"))
		return
	}
	if err := checkPath(p); err != nil {
		fail(w, err)
		return
	}
	depth := 1
	if v := q.Get("depth"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			fail(w, badRequest("invalid query parameter 'depth': %s", v))
			return
		}
		depth = min(n, maxListDepth)
	}
	ec := h.client(c, "")
	e, err := ec.stat(r.Context(), p)
	if err != nil {
		fail(w, err)
		return
	}
	if e.SymlinkTarget != nil {
		fail(w, badRequest("path is a symbolic link, refusing to traverse: %s", e.GetPath()))
		return
	}
	if !isDir(e) {
		fail(w, badRequest("path is not a directory: %s", e.GetPath()))
		return
	}
	var entries []*fspb.EntryInfo
	if depth > 0 {
		if entries, err = ec.listDir(r.Context(), e.GetPath(), uint32(depth)); err != nil {
			fail(w, err)
			return
		}
	}
	// A listing may have hundreds of thousands of entries: they are
	// encoded one by one as they are sent, not built as one answer.
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	bw.WriteByte('[')
	for i, en := range entries {
		if i > 0 {
			bw.WriteByte(',')
		}
		_ = enc.Encode(toFileInfo(en))
	}
	bw.WriteString("]\n")
	_ = bw.Flush()
}
