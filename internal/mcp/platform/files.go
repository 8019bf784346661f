package platform

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutch-sandbox/hutch/sdk"
)

// File tool bounds.
const (
	// MaxReadBytes is the largest file file_read and the edit tools read.
	MaxReadBytes = 10 << 20
	// MaxTextOutput is how much text file_read returns in one call; a
	// longer file is read in line ranges.
	MaxTextOutput = 256 << 10
	// MaxBinaryOutput is the largest binary file file_read returns.
	MaxBinaryOutput = 1 << 20
	// MaxListEntries caps file_list and the entries file_search looks at.
	MaxListEntries = 5000
)

// PathInput names a path in a sandbox.
type PathInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Path      string `json:"path" jsonschema:"absolute, or relative to /home/user"`
}

// ReadInput is file_read's input.
type ReadInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Path      string `json:"path" jsonschema:"absolute, or relative to /home/user"`
	Offset    int    `json:"offset,omitempty" jsonschema:"first line to return, counting from 1; default 1"`
	Limit     int    `json:"limit,omitempty" jsonschema:"number of lines to return; default all (up to 256 KiB)"`
	Encoding  string `json:"encoding,omitempty" jsonschema:"text (default) or base64: base64 returns the file's bytes as a resource"`
}

// ReadOutput describes what file_read returned; the text itself is the
// result's content.
type ReadOutput struct {
	Path       string `json:"path"`
	Size       int64  `json:"size"`
	Encoding   string `json:"encoding" jsonschema:"text, or base64 for binary content (returned as a resource)"`
	StartLine  int    `json:"start_line,omitempty"`
	EndLine    int    `json:"end_line,omitempty"`
	TotalLines int    `json:"total_lines,omitempty"`
	Truncated  bool   `json:"truncated,omitempty" jsonschema:"more lines follow: read on with offset end_line+1"`
}

// WriteInput is file_write's input.
type WriteInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Path      string `json:"path" jsonschema:"absolute, or relative to /home/user; parent directories are created"`
	Content   string `json:"content" jsonschema:"the file's new content"`
	Encoding  string `json:"encoding,omitempty" jsonschema:"text (default) or base64 (content is base64 of the bytes)"`
}

// WriteOutput describes a written file.
type WriteOutput struct {
	Path  string `json:"path"`
	Bytes int    `json:"bytes"`
}

// DeleteOutput says whether something was deleted.
type DeleteOutput struct {
	Path    string `json:"path"`
	Existed bool   `json:"existed"`
}

// ListFilesInput is file_list's input.
type ListFilesInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Path      string `json:"path,omitempty" jsonschema:"directory; default /home/user"`
	Depth     int    `json:"depth,omitempty" jsonschema:"levels below the directory to list, 1 to 5; default 1"`
}

// Entry is one file system entry.
type Entry struct {
	Path     string    `json:"path"`
	Type     string    `json:"type" jsonschema:"file, dir or symlink"`
	Size     int64     `json:"size"`
	Mode     string    `json:"mode" jsonschema:"permissions, as ls -l shows them"`
	Modified time.Time `json:"modified"`
	Target   string    `json:"target,omitempty" jsonschema:"where a symlink points"`
}

// ListFilesOutput lists entries.
type ListFilesOutput struct {
	Entries   []Entry `json:"entries"`
	Truncated bool    `json:"truncated,omitempty"`
}

// SearchInput is file_search's input.
type SearchInput struct {
	SandboxID  string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Path       string `json:"path,omitempty" jsonschema:"directory to search under; default /home/user"`
	Pattern    string `json:"pattern" jsonschema:"glob: *.py matches names anywhere below path; a pattern with / matches paths relative to path, ** standing for any number of directories (src/**/*.go)"`
	MaxResults int    `json:"max_results,omitempty" jsonschema:"default 200"`
}

// SearchOutput lists matches.
type SearchOutput struct {
	Matches   []string `json:"matches"`
	Truncated bool     `json:"truncated,omitempty"`
}

// MoveInput is file_move's input.
type MoveInput struct {
	SandboxID   string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Source      string `json:"source" jsonschema:"file or directory to move"`
	Destination string `json:"destination" jsonschema:"new path; its parent directories are created"`
}

// ReplaceInput is the input of file_replace_contents and file_edit.
type ReplaceInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Path      string `json:"path" jsonschema:"the file to change"`
	OldText   string `json:"old_text" jsonschema:"exact text to find (whitespace and line breaks included)"`
	NewText   string `json:"new_text" jsonschema:"text to put in its place"`
}

// ReplaceOutput says how many replacements were made.
type ReplaceOutput struct {
	Path         string `json:"path"`
	Replacements int    `json:"replacements"`
}

// MakeDirOutput says whether a directory was made.
type MakeDirOutput struct {
	Path    string `json:"path"`
	Created bool   `json:"created" jsonschema:"false when it existed already"`
}

func (s *Server) addFileTools(srv *mcp.Server) {
	addTool(srv, &mcp.Tool{Name: "file_read",
		Description: "Read a file from a sandbox. Text comes back as is (use offset and limit for line ranges of long files); binary files, or encoding base64, come back as a base64 resource.",
		Annotations: hint("Read file", true, false, true)}, s.read)
	addTool(srv, &mcp.Tool{Name: "file_write",
		Description: "Write a file in a sandbox, replacing it if it exists and creating parent directories.",
		Annotations: hint("Write file", false, true, true)}, s.write)
	addTool(srv, &mcp.Tool{Name: "file_delete",
		Description: "Delete a file (or symlink) in a sandbox. Not for directories: use file_delete_directories.",
		Annotations: hint("Delete file", false, true, true)}, s.deleteFile)
	addTool(srv, &mcp.Tool{Name: "file_list",
		Description: "List a directory in a sandbox: path, type, size, permissions and modification time of each entry, depth levels down.",
		Annotations: hint("List files", true, false, true)}, s.listFiles)
	addTool(srv, &mcp.Tool{Name: "file_search",
		Description: "Find files by glob pattern under a directory of a sandbox (e.g. *.py, src/**/*.go). Returns matching paths.",
		Annotations: hint("Search files", true, false, true)}, s.search)
	addTool(srv, &mcp.Tool{Name: "file_create_directories",
		Description: "Create a directory in a sandbox, with its parents (mkdir -p).",
		Annotations: hint("Create directories", false, false, true)}, s.makeDirs)
	addTool(srv, &mcp.Tool{Name: "file_delete_directories",
		Description: "Delete a directory in a sandbox with everything in it (rm -r).",
		Annotations: hint("Delete directories", false, true, true)}, s.deleteDirs)
	addTool(srv, &mcp.Tool{Name: "file_move",
		Description: "Move or rename a file or directory in a sandbox.",
		Annotations: hint("Move file", false, true, false)}, s.move)
	addTool(srv, &mcp.Tool{Name: "file_replace_contents",
		Description: "Replace every occurrence of old_text with new_text in a file of a sandbox. Fails if old_text does not occur.",
		Annotations: hint("Replace in file", false, true, false)}, s.replaceAll)
	addTool(srv, &mcp.Tool{Name: "file_edit",
		Description: "Replace one exact occurrence of old_text with new_text in a file of a sandbox. Fails, changing nothing, when old_text occurs zero times or more than once: add surrounding lines to make it unique.",
		Annotations: hint("Edit file", false, true, false)}, s.edit)
}

func (s *Server) read(ctx context.Context, req *mcp.CallToolRequest, in ReadInput) (*mcp.CallToolResult, ReadOutput, error) {
	if in.Encoding != "" && in.Encoding != "text" && in.Encoding != "base64" {
		return nil, ReadOutput{}, fmt.Errorf("encoding must be text or base64, got %q", in.Encoding)
	}
	if in.Offset < 0 || in.Limit < 0 {
		return nil, ReadOutput{}, errors.New("offset and limit must not be negative")
	}
	sbx, err := s.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return nil, ReadOutput{}, err
	}
	data, info, err := readFile(ctx, sbx, in.Path)
	if err != nil {
		return nil, ReadOutput{}, opFailed(err, in.SandboxID)
	}
	out := ReadOutput{Path: info.Path, Size: info.Size, Encoding: "text"}
	if in.Encoding == "base64" || !utf8.Valid(data) || bytes.IndexByte(data, 0) >= 0 {
		if len(data) > MaxBinaryOutput {
			return nil, ReadOutput{}, fmt.Errorf("%s is binary and %d bytes, more than the %d file_read returns; process it with command_run instead", info.Path, len(data), MaxBinaryOutput)
		}
		out.Encoding = "base64"
		mime := http.DetectContentType(data)
		res := &mcp.CallToolResult{Content: []mcp.Content{
			// Clients that show only text still learn what came back.
			&mcp.TextContent{Text: fmt.Sprintf("%s: %d bytes of %s, base64 in the attached resource", info.Path, len(data), mime)},
			&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "sandbox://" + in.SandboxID + info.Path, MIMEType: mime, Blob: data}},
		}}
		return res, out, nil
	}
	text, start, end, total, truncated := lineRange(string(data), in.Offset, in.Limit, MaxTextOutput)
	out.StartLine, out.EndLine, out.TotalLines, out.Truncated = start, end, total, truncated
	if truncated {
		text += fmt.Sprintf("\n[… lines %d-%d of %d shown; read on with offset %d]", start, end, total, end+1)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, out, nil
}

// readFile reads a regular file of at most MaxReadBytes.
func readFile(ctx context.Context, sbx *sdk.Sandbox, p string) ([]byte, *sdk.EntryInfo, error) {
	info, err := sbx.Files.GetInfo(ctx, p, nil)
	if err != nil {
		return nil, nil, err
	}
	if info.Type == sdk.FileTypeDir {
		return nil, nil, fmt.Errorf("%s is a directory: use file_list", info.Path)
	}
	if info.Size > MaxReadBytes {
		return nil, nil, fmt.Errorf("%s is %d bytes, more than the %d this tool reads; use command_run (head, grep, sed -n) for parts of it", info.Path, info.Size, MaxReadBytes)
	}
	rc, err := sbx.Files.ReadStream(ctx, p, nil)
	if err != nil {
		return nil, nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, MaxReadBytes+1))
	if err != nil {
		return nil, nil, err
	}
	if len(data) > MaxReadBytes {
		return nil, nil, fmt.Errorf("%s grew past %d bytes while being read", info.Path, MaxReadBytes)
	}
	return data, info, nil
}

// lineRange returns lines offset.. (1-based; 0 means 1) of text, at most
// limit of them (0: all) and at most maxBytes of text.
func lineRange(text string, offset, limit, maxBytes int) (out string, start, end, total int, truncated bool) {
	lines := strings.SplitAfter(text, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	total = len(lines)
	start = max(offset, 1)
	if start > total {
		return "", start, start - 1, total, false
	}
	last := total
	if limit > 0 {
		last = min(total, start+limit-1)
	}
	var b strings.Builder
	end = start - 1
	for i := start; i <= last; i++ {
		if b.Len()+len(lines[i-1]) > maxBytes && b.Len() > 0 {
			break
		}
		b.WriteString(lines[i-1])
		end = i
	}
	return b.String(), start, end, total, end < total && (limit == 0 || end < last)
}

func (s *Server) write(ctx context.Context, req *mcp.CallToolRequest, in WriteInput) (*mcp.CallToolResult, WriteOutput, error) {
	data := []byte(in.Content)
	switch in.Encoding {
	case "", "text":
	case "base64":
		var err error
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return nil, WriteOutput{}, fmt.Errorf("content is not valid base64: %w", err)
		}
	default:
		return nil, WriteOutput{}, fmt.Errorf("encoding must be text or base64, got %q", in.Encoding)
	}
	if in.Path == "" {
		return nil, WriteOutput{}, errors.New("path is required")
	}
	sbx, err := s.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return nil, WriteOutput{}, err
	}
	info, err := sbx.Files.Write(ctx, in.Path, data, nil)
	if err != nil {
		return nil, WriteOutput{}, opFailed(err, in.SandboxID)
	}
	return nil, WriteOutput{Path: info.Path, Bytes: len(data)}, nil
}

func (s *Server) deleteFile(ctx context.Context, req *mcp.CallToolRequest, in PathInput) (*mcp.CallToolResult, DeleteOutput, error) {
	return s.remove(ctx, req, in, false)
}

func (s *Server) deleteDirs(ctx context.Context, req *mcp.CallToolRequest, in PathInput) (*mcp.CallToolResult, DeleteOutput, error) {
	if p := path.Clean("/" + in.Path); p == "/" && strings.HasPrefix(in.Path, "/") {
		return nil, DeleteOutput{}, errors.New("refusing to delete / (kill the sandbox instead)")
	}
	return s.remove(ctx, req, in, true)
}

func (s *Server) remove(ctx context.Context, req *mcp.CallToolRequest, in PathInput, dir bool) (*mcp.CallToolResult, DeleteOutput, error) {
	if in.Path == "" {
		return nil, DeleteOutput{}, errors.New("path is required")
	}
	sbx, err := s.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return nil, DeleteOutput{}, err
	}
	info, err := sbx.Files.GetInfo(ctx, in.Path, nil)
	switch {
	case errors.Is(err, sdk.ErrNotFound):
		return nil, DeleteOutput{Path: in.Path}, nil
	case err != nil:
		return nil, DeleteOutput{}, opFailed(err, in.SandboxID)
	case dir && info.Type != sdk.FileTypeDir:
		return nil, DeleteOutput{}, fmt.Errorf("%s is not a directory: use file_delete", info.Path)
	case !dir && info.Type == sdk.FileTypeDir && info.SymlinkTarget == "":
		return nil, DeleteOutput{}, fmt.Errorf("%s is a directory: use file_delete_directories", info.Path)
	}
	if err := sbx.Files.Remove(ctx, in.Path, nil); err != nil {
		return nil, DeleteOutput{}, opFailed(err, in.SandboxID)
	}
	return nil, DeleteOutput{Path: info.Path, Existed: true}, nil
}

func entryOf(e sdk.EntryInfo) Entry {
	t := string(e.Type)
	if e.SymlinkTarget != "" {
		t = "symlink"
	}
	return Entry{Path: e.Path, Type: t, Size: e.Size, Mode: e.Permissions, Modified: e.ModifiedTime, Target: e.SymlinkTarget}
}

func (s *Server) listFiles(ctx context.Context, req *mcp.CallToolRequest, in ListFilesInput) (*mcp.CallToolResult, ListFilesOutput, error) {
	depth := in.Depth
	if depth == 0 {
		depth = 1
	}
	if depth < 1 || depth > 5 {
		return nil, ListFilesOutput{}, fmt.Errorf("depth must be between 1 and 5, got %d", in.Depth)
	}
	sbx, err := s.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return nil, ListFilesOutput{}, err
	}
	entries, err := sbx.Files.List(ctx, in.Path, &sdk.ListDirOptions{Depth: depth})
	if err != nil {
		return nil, ListFilesOutput{}, opFailed(err, in.SandboxID)
	}
	out := ListFilesOutput{Entries: []Entry{}}
	for _, e := range entries {
		if len(out.Entries) == MaxListEntries {
			out.Truncated = true
			break
		}
		out.Entries = append(out.Entries, entryOf(e))
	}
	return nil, out, nil
}

func (s *Server) search(ctx context.Context, req *mcp.CallToolRequest, in SearchInput) (*mcp.CallToolResult, SearchOutput, error) {
	if in.Pattern == "" {
		return nil, SearchOutput{}, errors.New("pattern is required, e.g. *.py")
	}
	if _, err := path.Match(strings.ReplaceAll(in.Pattern, "**", "*"), ""); err != nil {
		return nil, SearchOutput{}, fmt.Errorf("pattern %q is not a valid glob: %w", in.Pattern, err)
	}
	maxResults := in.MaxResults
	if maxResults <= 0 {
		maxResults = 200
	}
	sbx, err := s.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return nil, SearchOutput{}, err
	}
	root := in.Path
	info, err := sbx.Files.GetInfo(ctx, root, nil)
	if err != nil {
		return nil, SearchOutput{}, opFailed(err, in.SandboxID)
	}
	entries, err := sbx.Files.List(ctx, root, &sdk.ListDirOptions{Depth: 16})
	if err != nil {
		return nil, SearchOutput{}, opFailed(err, in.SandboxID)
	}
	out := SearchOutput{Matches: []string{}}
	for i, e := range entries {
		if i == MaxListEntries*4 {
			out.Truncated = true
			break
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(e.Path, info.Path), "/")
		if globMatch(in.Pattern, rel) {
			if len(out.Matches) == maxResults {
				out.Truncated = true
				break
			}
			out.Matches = append(out.Matches, e.Path)
		}
	}
	return nil, out, nil
}

// globMatch matches a relative path against a glob: a pattern without "/"
// matches the base name; otherwise segment by segment, "**" matching any
// number of segments. path.Match has no "**", hence this.
func globMatch(pattern, rel string) bool {
	if !strings.Contains(pattern, "/") {
		ok, _ := path.Match(pattern, path.Base(rel))
		return ok
	}
	return matchSegments(strings.Split(pattern, "/"), strings.Split(rel, "/"))
}

func matchSegments(pat, segs []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(segs); i++ {
				if matchSegments(pat[1:], segs[i:]) {
					return true
				}
			}
			return false
		}
		if len(segs) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], segs[0]); !ok {
			return false
		}
		pat, segs = pat[1:], segs[1:]
	}
	return len(segs) == 0
}

func (s *Server) makeDirs(ctx context.Context, req *mcp.CallToolRequest, in PathInput) (*mcp.CallToolResult, MakeDirOutput, error) {
	if in.Path == "" {
		return nil, MakeDirOutput{}, errors.New("path is required")
	}
	sbx, err := s.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return nil, MakeDirOutput{}, err
	}
	created, err := sbx.Files.MakeDir(ctx, in.Path, nil)
	if err != nil {
		return nil, MakeDirOutput{}, opFailed(err, in.SandboxID)
	}
	return nil, MakeDirOutput{Path: in.Path, Created: created}, nil
}

func (s *Server) move(ctx context.Context, req *mcp.CallToolRequest, in MoveInput) (*mcp.CallToolResult, Entry, error) {
	if in.Source == "" || in.Destination == "" {
		return nil, Entry{}, errors.New("source and destination are required")
	}
	sbx, err := s.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return nil, Entry{}, err
	}
	e, err := sbx.Files.Rename(ctx, in.Source, in.Destination, nil)
	if err != nil {
		return nil, Entry{}, opFailed(err, in.SandboxID)
	}
	return nil, entryOf(*e), nil
}

func (s *Server) replaceAll(ctx context.Context, req *mcp.CallToolRequest, in ReplaceInput) (*mcp.CallToolResult, ReplaceOutput, error) {
	return s.replace(ctx, req, in, false)
}

func (s *Server) edit(ctx context.Context, req *mcp.CallToolRequest, in ReplaceInput) (*mcp.CallToolResult, ReplaceOutput, error) {
	return s.replace(ctx, req, in, true)
}

// replace replaces old_text in a file: exactly one occurrence when unique,
// else every occurrence (at least one).
func (s *Server) replace(ctx context.Context, req *mcp.CallToolRequest, in ReplaceInput, unique bool) (*mcp.CallToolResult, ReplaceOutput, error) {
	if in.OldText == "" {
		return nil, ReplaceOutput{}, errors.New("old_text is empty: say what to replace (to write a whole file, use file_write)")
	}
	sbx, err := s.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return nil, ReplaceOutput{}, err
	}
	data, info, err := readFile(ctx, sbx, in.Path)
	if err != nil {
		return nil, ReplaceOutput{}, opFailed(err, in.SandboxID)
	}
	text := string(data)
	n := strings.Count(text, in.OldText)
	switch {
	case n == 0:
		return nil, ReplaceOutput{}, fmt.Errorf("old_text does not occur in %s; nothing changed (read the file with file_read and copy the text exactly, whitespace included)", info.Path)
	case unique && n > 1:
		return nil, ReplaceOutput{}, fmt.Errorf("old_text occurs %d times in %s; nothing changed (include more surrounding lines so that it occurs once, or use file_replace_contents to replace all)", n, info.Path)
	}
	text = strings.ReplaceAll(text, in.OldText, in.NewText)
	if _, err := sbx.Files.Write(ctx, in.Path, []byte(text), nil); err != nil {
		return nil, ReplaceOutput{}, opFailed(err, in.SandboxID)
	}
	return nil, ReplaceOutput{Path: info.Path, Replacements: n}, nil
}
