package platform

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/text/encoding"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
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

// ReadInput is file_read's input.
type ReadInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Path      string `json:"path" jsonschema:"absolute, or relative to /home/user"`
	Offset    int    `json:"offset,omitempty" jsonschema:"first line to return, counting from 1; default 1"`
	Limit     int    `json:"limit,omitempty" jsonschema:"number of lines to return; default all (up to 256 KiB)"`
	Encoding  string `json:"encoding,omitempty" jsonschema:"text (default) or base64: base64 returns the file's bytes as a resource. OpenSandbox's shape names a text encoding instead: utf-8, latin-1, ascii or an IANA charset"`
	// OpenSandbox's.
	RangeHeader      string `json:"range_header,omitempty" jsonschema:"OpenSandbox's: the bytes to read, as an HTTP Range header: bytes=0-1023, bytes=1024- or bytes=-100 (the last 100); only they are read"`
	ConnectIfMissing *bool  `json:"connect_if_missing,omitempty" jsonschema:"OpenSandbox's; ignored: every sandbox of the key is reachable"`
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

// FileContent is file_read's output in OpenSandbox's shape.
type FileContent struct {
	Path    string `json:"path"`
	Content string `json:"content" jsonschema:"the file's text (or the range's), decoded with encoding"`
}

// WriteInput is file_write's input.
type WriteInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Path      string `json:"path" jsonschema:"absolute, or relative to /home/user; parent directories are created"`
	Content   string `json:"content" jsonschema:"the file's new content"`
	Encoding  string `json:"encoding,omitempty" jsonschema:"text (default) or base64 (content is base64 of the bytes). OpenSandbox's shape names a text encoding to write the content in instead: utf-8, latin-1, ascii or an IANA charset"`
	// OpenSandbox's.
	Mode             *int   `json:"mode,omitempty" jsonschema:"OpenSandbox's: permissions as octal digits, e.g. 644; default 755 in OpenSandbox's shape"`
	Owner            string `json:"owner,omitempty" jsonschema:"OpenSandbox's: the user to own the file; default root in OpenSandbox's shape, the sandbox's default user otherwise"`
	Group            string `json:"group,omitempty" jsonschema:"OpenSandbox's: the group to own the file; default root in OpenSandbox's shape"`
	ConnectIfMissing *bool  `json:"connect_if_missing,omitempty" jsonschema:"OpenSandbox's; ignored"`
}

// WriteOutput describes a written file.
type WriteOutput struct {
	Path   string `json:"path"`
	Bytes  int    `json:"bytes"`
	Status string `json:"status" jsonschema:"written (OpenSandbox's result)"`
}

// DeleteInput is the input of file_delete and file_delete_directories:
// Hutch's one path or OpenSandbox's paths.
type DeleteInput struct {
	SandboxID        string   `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Path             string   `json:"path,omitempty" jsonschema:"absolute, or relative to /home/user. Give path or paths"`
	Paths            []string `json:"paths,omitempty" jsonschema:"OpenSandbox's: several paths, deleted in order; the first failure stops the rest"`
	ConnectIfMissing *bool    `json:"connect_if_missing,omitempty" jsonschema:"OpenSandbox's; ignored"`
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
	SandboxID        string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Path             string `json:"path,omitempty" jsonschema:"directory to search under; default /home/user"`
	Pattern          string `json:"pattern" jsonschema:"glob: *.py matches names anywhere below path; a pattern with / matches paths relative to path, ** standing for any number of directories (src/**/*.go)"`
	MaxResults       int    `json:"max_results,omitempty" jsonschema:"default 200"`
	ConnectIfMissing *bool  `json:"connect_if_missing,omitempty" jsonschema:"OpenSandbox's; ignored"`
}

// SearchOutput lists matches: their paths, and OpenSandbox's entries.
type SearchOutput struct {
	Matches   []string    `json:"matches"`
	Truncated bool        `json:"truncated,omitempty"`
	Result    []FileEntry `json:"result" jsonschema:"the matches as OpenSandbox describes them"`
}

// FileEntry is OpenSandbox's EntryInfo.
type FileEntry struct {
	Path       string    `json:"path"`
	Type       string    `json:"type" jsonschema:"file, directory or symlink"`
	Mode       int       `json:"mode" jsonschema:"permissions as octal digits, e.g. 644"`
	Owner      string    `json:"owner"`
	Group      string    `json:"group"`
	Size       int64     `json:"size"`
	ModifiedAt time.Time `json:"modified_at"`
	CreatedAt  time.Time `json:"created_at" jsonschema:"the modification time: Linux keeps no creation time here"`
}

// MoveInput is file_move's input: Hutch's source and destination, or
// OpenSandbox's entries.
type MoveInput struct {
	SandboxID        string      `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Source           string      `json:"source,omitempty" jsonschema:"file or directory to move. Give source and destination, or entries"`
	Destination      string      `json:"destination,omitempty" jsonschema:"new path; its parent directories are created"`
	Entries          []MoveEntry `json:"entries,omitempty" jsonschema:"OpenSandbox's: several moves, made in order; the first failure stops the rest"`
	ConnectIfMissing *bool       `json:"connect_if_missing,omitempty" jsonschema:"OpenSandbox's; ignored"`
}

// MoveEntry is one of OpenSandbox's moves.
type MoveEntry struct {
	Source      string `json:"source,omitempty" jsonschema:"what to move (or src)"`
	Destination string `json:"destination,omitempty" jsonschema:"where to (or dest)"`
	Src         string `json:"src,omitempty" jsonschema:"the same as source"`
	Dest        string `json:"dest,omitempty" jsonschema:"the same as destination"`
}

// ReplaceInput is file_edit's input.
type ReplaceInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Path      string `json:"path" jsonschema:"the file to change"`
	OldText   string `json:"old_text" jsonschema:"exact text to find (whitespace and line breaks included)"`
	NewText   string `json:"new_text" jsonschema:"text to put in its place"`
}

// ReplaceContentsInput is file_replace_contents's input: Hutch's path,
// old_text and new_text, or OpenSandbox's entries.
type ReplaceContentsInput struct {
	SandboxID        string                `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Path             string                `json:"path,omitempty" jsonschema:"the file to change. Give path, old_text and new_text, or entries"`
	OldText          string                `json:"old_text,omitempty" jsonschema:"exact text to find (whitespace and line breaks included)"`
	NewText          *string               `json:"new_text,omitempty" jsonschema:"text to put in its place"`
	Entries          []ContentReplaceEntry `json:"entries,omitempty" jsonschema:"OpenSandbox's: several files, changed in order; the first failure stops the rest. A file without old_content is left as it is (replaced_count 0)"`
	ConnectIfMissing *bool                 `json:"connect_if_missing,omitempty" jsonschema:"OpenSandbox's; ignored"`
}

// ContentReplaceEntry is one of OpenSandbox's replacements.
type ContentReplaceEntry struct {
	Path       string `json:"path"`
	OldContent string `json:"old_content" jsonschema:"exact text to find; every occurrence is replaced"`
	NewContent string `json:"new_content"`
}

// ReplaceOutput says how many replacements were made.
type ReplaceOutput struct {
	Path         string `json:"path"`
	Replacements int    `json:"replacements"`
}

// ReplaceResults is file_replace_contents's output in OpenSandbox's
// shape.
type ReplaceResults struct {
	Result []ContentReplaceResult `json:"result"`
}

// ContentReplaceResult says how many replacements one file had.
type ContentReplaceResult struct {
	Path          string `json:"path"`
	ReplacedCount int    `json:"replaced_count"`
}

// MakeDirsInput is file_create_directories's input: Hutch's path, or
// OpenSandbox's entries.
type MakeDirsInput struct {
	SandboxID        string           `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Path             string           `json:"path,omitempty" jsonschema:"the directory, absolute or relative to /home/user. Give path or entries"`
	Entries          []DirectoryEntry `json:"entries,omitempty" jsonschema:"OpenSandbox's: several directories, made in order with their modes and owners; the first failure stops the rest"`
	ConnectIfMissing *bool            `json:"connect_if_missing,omitempty" jsonschema:"OpenSandbox's; ignored"`
}

// DirectoryEntry is one of OpenSandbox's directories.
type DirectoryEntry struct {
	Path  string `json:"path"`
	Mode  *int   `json:"mode,omitempty" jsonschema:"permissions as octal digits; default 755"`
	Owner string `json:"owner,omitempty"`
	Group string `json:"group,omitempty"`
}

// MakeDirOutput says whether a directory was made.
type MakeDirOutput struct {
	Path    string `json:"path"`
	Created bool   `json:"created" jsonschema:"false when it existed already"`
}

func (s *Server) addFileTools(srv *mcp.Server) {
	addShapedTool[ReadInput, ReadOutput, FileContent](srv, &mcp.Tool{Name: "file_read",
		Description: "Read a file from a sandbox. Text comes back as is (use offset and limit for line ranges of long files); binary files, or encoding base64, come back as a base64 resource. " +
			"OpenSandbox's shape (range_header, a text encoding such as utf-8, or connect_if_missing) returns {path, content}: the file's text, or a byte range's (range_header bytes=0-1023), at most 256 KiB at once. " +
			"A call with only sandbox_id and path that reads a whole text file gets content too.",
		Annotations: hint("Read file", true, false, true)}, s.read)
	addTool(srv, &mcp.Tool{Name: "file_write",
		Description: "Write a file in a sandbox, owned by its default user, replacing it if it exists and creating parent directories; returns its path, size and status: written. " +
			"OpenSandbox's shape (mode, owner, group, a text encoding such as utf-8) sets the file's mode and owner too, by default as OpenSandbox does: 755, root:root.",
		Annotations: hint("Write file", false, true, true)}, s.write)
	addShapedTool[DeleteInput, DeleteOutput, StatusOutput](srv, &mcp.Tool{Name: "file_delete",
		Description: "Delete a file (or symlink) in a sandbox: path, or OpenSandbox's paths (→ status: deleted). A missing file is no error. Not for directories: use file_delete_directories.",
		Annotations: hint("Delete file", false, true, true)}, s.deleteFile)
	addTool(srv, &mcp.Tool{Name: "file_list",
		Description: "List a directory in a sandbox: path, type, size, permissions and modification time of each entry, depth levels down.",
		Annotations: hint("List files", true, false, true)}, s.listFiles)
	addTool(srv, &mcp.Tool{Name: "file_search",
		Description: "Find files by glob pattern under a directory of a sandbox (e.g. *.py, src/**/*.go). Returns matching paths (matches) and the same entries as OpenSandbox describes them (result).",
		Annotations: hint("Search files", true, false, true)}, s.search)
	addShapedTool[MakeDirsInput, MakeDirOutput, StatusOutput](srv, &mcp.Tool{Name: "file_create_directories",
		Description: "Create a directory in a sandbox, with its parents (mkdir -p): path, or OpenSandbox's entries [{path, mode (default 755), owner, group}] (→ status: created).",
		Annotations: hint("Create directories", false, false, true)}, s.makeDirs)
	addShapedTool[DeleteInput, DeleteOutput, StatusOutput](srv, &mcp.Tool{Name: "file_delete_directories",
		Description: "Delete a directory in a sandbox with everything in it (rm -r): path, or OpenSandbox's paths (→ status: deleted).",
		Annotations: hint("Delete directories", false, true, true)}, s.deleteDirs)
	addShapedTool[MoveInput, Entry, StatusOutput](srv, &mcp.Tool{Name: "file_move",
		Description: "Move or rename a file or directory in a sandbox: source and destination (→ the moved entry), or OpenSandbox's entries [{source, destination}] (→ status: moved).",
		Annotations: hint("Move file", false, true, false)}, s.move)
	addShapedTool[ReplaceContentsInput, ReplaceOutput, ReplaceResults](srv, &mcp.Tool{Name: "file_replace_contents",
		Description: "Replace every occurrence of old_text with new_text in a file of a sandbox; fails if old_text does not occur. " +
			"OpenSandbox's shape: entries [{path, old_content, new_content}] → result [{path, replaced_count}], where a count of 0 (nothing changed) is no failure.",
		Annotations: hint("Replace in file", false, true, false)}, s.replaceAll)
	addTool(srv, &mcp.Tool{Name: "file_edit",
		Description: "Replace one exact occurrence of old_text with new_text in a file of a sandbox. Fails, changing nothing, when old_text occurs zero times or more than once: add surrounding lines to make it unique.",
		Annotations: hint("Edit file", false, true, false)}, s.edit)
}

// batch does each of n items in order and stops at the first failure,
// which it reports with the item's place: OpenSandbox's lists.
func batch(name string, n int, label func(int) string, do func(int) error) error {
	for i := range n {
		if err := do(i); err != nil {
			return fmt.Errorf("%s[%d] (%s): %w; the %d before it were done, the %d after it not tried", name, i, label(i), err, i, n-i-1)
		}
	}
	return nil
}

// hutchEncoding reports whether an encoding argument is one of Hutch's
// (text, base64), not an OpenSandbox text encoding.
func hutchEncoding(e string) bool { return e == "" || e == "text" || e == "base64" }

func (s *Server) read(ctx context.Context, req *mcp.CallToolRequest, in ReadInput) (*mcp.CallToolResult, any, error) {
	if in.RangeHeader != "" && (in.Offset != 0 || in.Limit != 0) {
		return nil, nil, errors.New("range_header (OpenSandbox's, bytes) and offset and limit (Hutch's, lines) are two ways to read part of a file: give one")
	}
	if in.Offset < 0 || in.Limit < 0 {
		return nil, nil, errors.New("offset and limit must not be negative")
	}
	if in.RangeHeader != "" || in.ConnectIfMissing != nil || !hutchEncoding(in.Encoding) {
		return s.readText(ctx, req, in)
	}
	sbx, err := s.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	data, info, err := readFile(ctx, sbx, in.Path)
	if err != nil {
		return nil, nil, opFailed(err, in.SandboxID)
	}
	out := ReadOutput{Path: info.Path, Size: info.Size, Encoding: "text"}
	if in.Encoding == "base64" || !utf8.Valid(data) || bytes.IndexByte(data, 0) >= 0 {
		if len(data) > MaxBinaryOutput {
			return nil, nil, fmt.Errorf("%s is binary and %d bytes, more than the %d file_read returns; process it with command_run instead", info.Path, len(data), MaxBinaryOutput)
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
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
	if truncated {
		res.Content[0].(*mcp.TextContent).Text += fmt.Sprintf("\n[… lines %d-%d of %d shown; read on with offset %d]", start, end, total, end+1)
	}
	if in.Offset != 0 || in.Limit != 0 || in.Encoding != "" || truncated {
		return res, out, nil
	}
	// Neither shape's arguments, and the whole text: OpenSandbox's
	// content too.
	merged, err := both(out, FileContent{Path: in.Path, Content: text})
	if err != nil {
		return nil, nil, err
	}
	return res, merged, nil
}

// readText is file_read in OpenSandbox's shape: the text of a file, or
// of a byte range of it, decoded with the call's encoding, read whole or
// not at all.
func (s *Server) readText(ctx context.Context, req *mcp.CallToolRequest, in ReadInput) (*mcp.CallToolResult, any, error) {
	var enc encoding.Encoding
	if in.Encoding != "base64" && in.Encoding != "text" {
		var err error
		if enc, err = textEncoding(in.Encoding); err != nil {
			return nil, nil, err
		}
	}
	sbx, err := s.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	info, err := sbx.Files.GetInfo(ctx, in.Path, nil)
	if err != nil {
		return nil, nil, opFailed(err, in.SandboxID)
	}
	if info.Type == sdk.FileTypeDir {
		return nil, nil, fmt.Errorf("%s is a directory: use file_list", info.Path)
	}
	var data []byte
	if in.RangeHeader != "" {
		off, n, err := byteRange(in.RangeHeader, info.Size)
		if err != nil {
			return nil, nil, err
		}
		if n > MaxTextOutput {
			return nil, nil, fmt.Errorf("range_header %q names %d bytes, more than the %d file_read returns at once: read smaller ranges", in.RangeHeader, n, MaxTextOutput)
		}
		rc, err := sbx.Files.ReadRange(ctx, in.Path, off, n, nil)
		if err != nil {
			return nil, nil, opFailed(err, in.SandboxID)
		}
		defer rc.Close()
		if data, err = io.ReadAll(io.LimitReader(rc, n)); err != nil {
			return nil, nil, opFailed(err, in.SandboxID)
		}
	} else {
		if info.Size > MaxTextOutput {
			return nil, nil, fmt.Errorf("%s is %d bytes, more than the %d file_read returns at once: read it in parts with range_header, e.g. bytes=0-%d", info.Path, info.Size, MaxTextOutput, MaxTextOutput-1)
		}
		rc, err := sbx.Files.ReadStream(ctx, in.Path, nil)
		if err != nil {
			return nil, nil, opFailed(err, in.SandboxID)
		}
		defer rc.Close()
		if data, err = io.ReadAll(io.LimitReader(rc, MaxTextOutput+1)); err != nil {
			return nil, nil, opFailed(err, in.SandboxID)
		}
		if len(data) > MaxTextOutput {
			return nil, nil, fmt.Errorf("%s grew past %d bytes while being read: read it in parts with range_header", info.Path, MaxTextOutput)
		}
	}
	var text string
	switch in.Encoding {
	case "base64":
		text = base64.StdEncoding.EncodeToString(data)
	default:
		name := cmp.Or(in.Encoding, "utf-8")
		if in.Encoding == "text" {
			name = "utf-8"
		}
		if text, err = decodeText(data, enc, name); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", info.Path, err)
		}
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, FileContent{Path: in.Path, Content: text}, nil
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
	osb := in.Mode != nil || in.Owner != "" || in.Group != "" || in.ConnectIfMissing != nil || !hutchEncoding(in.Encoding)
	data := []byte(in.Content)
	switch in.Encoding {
	case "", "text":
	case "base64":
		var err error
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return nil, WriteOutput{}, fmt.Errorf("content is not valid base64: %w", err)
		}
	default:
		enc, err := textEncoding(in.Encoding)
		if err != nil {
			return nil, WriteOutput{}, err
		}
		if data, err = encodeText(in.Content, enc, in.Encoding); err != nil {
			return nil, WriteOutput{}, err
		}
	}
	var mode *os.FileMode
	if osb {
		// OpenSandbox's defaults: its SDK's mode, and the owner of what
		// its execd (root) writes.
		m, err := fileMode(cmp.Or(ptrValue(in.Mode), 755))
		if err != nil {
			return nil, WriteOutput{}, err
		}
		mode = &m
		in.Owner, in.Group = cmp.Or(in.Owner, "root"), cmp.Or(in.Group, "root")
	}
	if in.Path == "" {
		return nil, WriteOutput{}, errors.New("path is required")
	}
	sbx, err := s.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return nil, WriteOutput{}, err
	}
	if mode != nil {
		p, err := writeWithAttributes(ctx, sbx, in.Path, data, *mode, in.Owner, in.Group)
		if err != nil {
			return nil, WriteOutput{}, opFailed(err, in.SandboxID)
		}
		return nil, WriteOutput{Path: p, Bytes: len(data), Status: "written"}, nil
	}
	info, err := sbx.Files.Write(ctx, in.Path, data, nil)
	if err != nil {
		return nil, WriteOutput{}, opFailed(err, in.SandboxID)
	}
	return nil, WriteOutput{Path: info.Path, Bytes: len(data), Status: "written"}, nil
}

// writeWithAttributes writes a file with its mode, owner and group, all
// or nothing: into a new file beside it, which gets them and then takes
// its place, so that an owner the sandbox lacks leaves the file as it
// was. The new file, and any parent directory made for it, is written as
// the sandbox's default user. It returns the file's absolute path.
func writeWithAttributes(ctx context.Context, sbx *sdk.Sandbox, p string, data []byte, mode os.FileMode, owner, group string) (string, error) {
	tmp := path.Join(path.Dir(p), "."+path.Base(p)+"."+strings.TrimPrefix(newCommandID(), "cmd_")+".hutch-write")
	info, err := sbx.Files.Write(ctx, tmp, data, nil)
	if err != nil {
		return "", err
	}
	err = setAttributes(ctx, sbx, info.Path, &mode, owner, group)
	var e *sdk.EntryInfo
	if err == nil {
		e, err = sbx.Files.Rename(ctx, info.Path, p, nil)
	}
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		sbx.Files.Remove(rctx, info.Path, &sdk.FileOptions{User: "root"})
		return "", err
	}
	return e.Path, nil
}

// ptrValue is *p, or the zero value for nil.
func ptrValue[T any](p *T) T {
	var v T
	if p != nil {
		v = *p
	}
	return v
}

func (s *Server) deleteFile(ctx context.Context, req *mcp.CallToolRequest, in DeleteInput) (*mcp.CallToolResult, any, error) {
	return s.remove(ctx, req, in, false)
}

func (s *Server) deleteDirs(ctx context.Context, req *mcp.CallToolRequest, in DeleteInput) (*mcp.CallToolResult, any, error) {
	return s.remove(ctx, req, in, true)
}

// remove is file_delete and file_delete_directories: one path, or
// OpenSandbox's list of them.
func (s *Server) remove(ctx context.Context, req *mcp.CallToolRequest, in DeleteInput, dir bool) (*mcp.CallToolResult, any, error) {
	if err := conflict("path", in.Path != "", "paths", in.Paths != nil); err != nil {
		return nil, nil, err
	}
	osb := in.Paths != nil || in.ConnectIfMissing != nil
	paths := in.Paths
	if in.Path != "" || !osb {
		paths = []string{in.Path}
	}
	for _, p := range paths {
		if p == "" {
			return nil, nil, errors.New("path is required")
		}
		if dir && path.Clean("/"+p) == "/" && strings.HasPrefix(p, "/") {
			return nil, nil, errors.New("refusing to delete / (kill the sandbox instead)")
		}
	}
	sbx, err := s.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	var out DeleteOutput
	err = batch("paths", len(paths), func(i int) string { return paths[i] }, func(i int) error {
		out, err = removeOne(ctx, sbx, paths[i], dir)
		return err
	})
	return batchAnswer(err, osb, "deleted", out, in.SandboxID)
}

// removeOne removes the file (or the directory, with dir) at p; nothing
// there is no error.
func removeOne(ctx context.Context, sbx *sdk.Sandbox, p string, dir bool) (DeleteOutput, error) {
	info, err := sbx.Files.GetInfo(ctx, p, nil)
	switch {
	case errors.Is(err, sdk.ErrNotFound):
		return DeleteOutput{Path: p}, nil
	case err != nil:
		return DeleteOutput{}, err
	case dir && info.Type != sdk.FileTypeDir:
		return DeleteOutput{}, fmt.Errorf("%s is not a directory: use file_delete", info.Path)
	case !dir && info.Type == sdk.FileTypeDir && info.SymlinkTarget == "":
		return DeleteOutput{}, fmt.Errorf("%s is a directory: use file_delete_directories", info.Path)
	}
	if err := sbx.Files.Remove(ctx, p, nil); err != nil {
		return DeleteOutput{}, err
	}
	return DeleteOutput{Path: info.Path, Existed: true}, nil
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
	out := SearchOutput{Matches: []string{}, Result: []FileEntry{}}
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
			out.Result = append(out.Result, fileEntryOf(e))
		}
	}
	return nil, out, nil
}

// fileEntryOf describes e as OpenSandbox does.
func fileEntryOf(e sdk.EntryInfo) FileEntry {
	t := string(e.Type)
	switch {
	case e.SymlinkTarget != "":
		t = "symlink"
	case e.Type == sdk.FileTypeDir:
		t = "directory"
	}
	mode, _ := strconv.Atoi(fmt.Sprintf("%o", e.Mode.Perm()|e.Mode&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky)))
	return FileEntry{Path: e.Path, Type: t, Mode: mode, Owner: e.Owner, Group: e.Group, Size: e.Size,
		ModifiedAt: e.ModifiedTime, CreatedAt: e.ModifiedTime}
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

func (s *Server) makeDirs(ctx context.Context, req *mcp.CallToolRequest, in MakeDirsInput) (*mcp.CallToolResult, any, error) {
	if err := conflict("path", in.Path != "", "entries", in.Entries != nil); err != nil {
		return nil, nil, err
	}
	osb := in.Entries != nil || in.ConnectIfMissing != nil
	entries := in.Entries
	if in.Path != "" || !osb {
		entries = []DirectoryEntry{{Path: in.Path}}
	}
	modes := make([]*os.FileMode, len(entries))
	for i, e := range entries {
		if e.Path == "" {
			return nil, nil, errors.New("path is required")
		}
		if osb {
			m, err := fileMode(cmp.Or(ptrValue(e.Mode), 755))
			if err != nil {
				return nil, nil, fmt.Errorf("entries[%d]: %w", i, err)
			}
			modes[i] = &m
		}
	}
	sbx, err := s.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	var out MakeDirOutput
	err = batch("entries", len(entries), func(i int) string { return entries[i].Path }, func(i int) error {
		e := entries[i]
		created, err := sbx.Files.MakeDir(ctx, e.Path, nil)
		if err != nil {
			return err
		}
		out = MakeDirOutput{Path: e.Path, Created: created}
		if modes[i] == nil {
			return nil
		}
		info, err := sbx.Files.GetInfo(ctx, e.Path, nil)
		if err != nil {
			return err
		}
		if info.Type != sdk.FileTypeDir {
			return fmt.Errorf("%s exists and is not a directory", info.Path)
		}
		return setAttributes(ctx, sbx, info.Path, modes[i], e.Owner, e.Group)
	})
	return batchAnswer(err, osb, "created", out, in.SandboxID)
}

func (s *Server) move(ctx context.Context, req *mcp.CallToolRequest, in MoveInput) (*mcp.CallToolResult, any, error) {
	if err := conflict("source and destination", in.Source != "" || in.Destination != "", "entries", in.Entries != nil); err != nil {
		return nil, nil, err
	}
	osb := in.Entries != nil || in.ConnectIfMissing != nil
	entries := in.Entries
	if in.Source != "" || in.Destination != "" || !osb {
		entries = []MoveEntry{{Source: in.Source, Destination: in.Destination}}
	}
	for i, e := range entries {
		for _, err := range []error{conflict("source", e.Source != "", "src", e.Src != ""), conflict("destination", e.Destination != "", "dest", e.Dest != "")} {
			if err != nil {
				return nil, nil, fmt.Errorf("entries[%d]: %w", i, err)
			}
		}
		entries[i] = MoveEntry{Source: e.Source + e.Src, Destination: e.Destination + e.Dest}
		if entries[i].Source == "" || entries[i].Destination == "" {
			return nil, nil, errors.New("source and destination are required")
		}
	}
	sbx, err := s.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	var out Entry
	err = batch("entries", len(entries), func(i int) string { return entries[i].Source + " -> " + entries[i].Destination }, func(i int) error {
		e, err := sbx.Files.Rename(ctx, entries[i].Source, entries[i].Destination, nil)
		if err == nil {
			out = entryOf(*e)
		}
		return err
	})
	return batchAnswer(err, osb, "moved", out, in.SandboxID)
}

func (s *Server) replaceAll(ctx context.Context, req *mcp.CallToolRequest, in ReplaceContentsInput) (*mcp.CallToolResult, any, error) {
	hutch := in.Path != "" || in.OldText != "" || in.NewText != nil
	if err := conflict("path, old_text and new_text", hutch, "entries", in.Entries != nil); err != nil {
		return nil, nil, err
	}
	if hutch || (in.Entries == nil && in.ConnectIfMissing == nil) {
		if in.NewText == nil {
			return nil, nil, errors.New("new_text is required (an empty one deletes old_text)")
		}
		res, out, err := s.replace(ctx, req, ReplaceInput{SandboxID: in.SandboxID, Path: in.Path, OldText: in.OldText, NewText: *in.NewText}, false)
		if err != nil {
			return nil, nil, err
		}
		return res, out, nil
	}
	for i, e := range in.Entries {
		if e.OldContent == "" {
			return nil, nil, fmt.Errorf("entries[%d].old_content is empty: say what to replace (to write a whole file, use file_write)", i)
		}
	}
	sbx, err := s.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	out := ReplaceResults{Result: []ContentReplaceResult{}}
	err = batch("entries", len(in.Entries), func(i int) string { return in.Entries[i].Path }, func(i int) error {
		e := in.Entries[i]
		n, _, err := replaceIn(ctx, sbx, e.Path, e.OldContent, e.NewContent, false)
		if err == nil {
			out.Result = append(out.Result, ContentReplaceResult{Path: e.Path, ReplacedCount: n})
		}
		return err
	})
	if err != nil {
		return nil, nil, opFailed(err, in.SandboxID)
	}
	return nil, out, nil
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
	n, p, err := replaceIn(ctx, sbx, in.Path, in.OldText, in.NewText, unique)
	switch {
	case err != nil:
		return nil, ReplaceOutput{}, opFailed(err, in.SandboxID)
	case n == 0:
		return nil, ReplaceOutput{}, fmt.Errorf("old_text does not occur in %s; nothing changed (read the file with file_read and copy the text exactly, whitespace included)", p)
	case unique && n > 1:
		return nil, ReplaceOutput{}, fmt.Errorf("old_text occurs %d times in %s; nothing changed (include more surrounding lines so that it occurs once, or use file_replace_contents to replace all)", n, p)
	}
	return nil, ReplaceOutput{Path: p, Replacements: n}, nil
}

// replaceIn counts the occurrences of old in the file at p and, unless
// there are none or, with onlyOne, more than one, replaces them all with
// repl. It returns the count and the file's absolute path.
// maxReplaceResult bounds what a replacement writes back (and builds in
// memory first): the largest file the tools read whole.
const maxReplaceResult = MaxReadBytes

func replaceIn(ctx context.Context, sbx *sdk.Sandbox, p, old, repl string, onlyOne bool) (int, string, error) {
	data, info, err := readFile(ctx, sbx, p)
	if err != nil {
		return 0, "", err
	}
	text := string(data)
	n := strings.Count(text, old)
	if n == 0 || (onlyOne && n > 1) {
		return n, info.Path, nil
	}
	// The result's size is known before it is built: a short text
	// replaced by a long one everywhere in a large file would otherwise
	// build gigabytes in this process (review 30, H4).
	if size := int64(len(text)) + int64(n)*(int64(len(repl))-int64(len(old))); size > maxReplaceResult {
		return 0, "", fmt.Errorf("replacing %d occurrences in %s would make it %d bytes, more than the %d bytes this tool writes: %w",
			n, info.Path, size, maxReplaceResult, errdefs.ErrInvalidArgument)
	}
	if _, err := sbx.Files.Write(ctx, p, []byte(strings.ReplaceAll(text, old, repl)), nil); err != nil {
		return 0, "", err
	}
	return n, info.Path, nil
}

// batchAnswer is the answer of a tool that works through a batch (batch):
// the error of the item that failed (in Hutch's shape, which has one item,
// without the item's place), OpenSandbox's {"status": status} when the call
// is in its shape, else out.
func batchAnswer(err error, osb bool, status string, out any, sandboxID string) (*mcp.CallToolResult, any, error) {
	if err != nil && !osb {
		err = errors.Unwrap(err) // one item: no place to report
	}
	switch {
	case err != nil:
		return nil, nil, opFailed(err, sandboxID)
	case osb:
		return nil, StatusOutput{Status: status}, nil
	}
	return nil, out, nil
}
