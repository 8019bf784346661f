package platform

// OpenSandbox's tool contract. Hutch's tools carry the names of
// OpenSandbox's MCP server (opensandbox-mcp 1.1.1) and accept its
// arguments as well as their own: each argument has Hutch's name, or
// OpenSandbox's, or both (a call gives one of them). A call that uses an
// argument only OpenSandbox's tool has is a call "in OpenSandbox's
// shape", one that uses an argument only Hutch's has is in Hutch's. Where
// the two results differ, a call in one shape gets that shape's, and a
// call in neither (the arguments both tools share) gets both, merged,
// since either client may have made it (each tool's description says
// which). What follows are OpenSandbox's result types and the
// conversions both shapes share.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/charmap"
	"golang.org/x/text/encoding/ianaindex"

	"github.com/hutch-sandbox/hutch/sdk"
)

// OpenSandboxInfo is OpenSandbox's SandboxInfo.
type OpenSandboxInfo struct {
	OpenSandboxFields
	Metadata map[string]string `json:"metadata,omitempty"`
}

// OpenSandboxFields are OpenSandbox's SandboxInfo but its metadata,
// which sandbox_get_info shares with Hutch's fields.
type OpenSandboxFields struct {
	ID         string            `json:"id" jsonschema:"the sandbox's id (OpenSandbox's name for sandbox_id)"`
	Status     OpenSandboxStatus `json:"status"`
	Entrypoint []string          `json:"entrypoint" jsonschema:"the command the sandbox started in the background when it came up; empty for none"`
	ExpiresAt  *time.Time        `json:"expires_at,omitempty" jsonschema:"when the sandbox will be killed unless renewed"`
	CreatedAt  time.Time         `json:"created_at"`
	Image      *OpenSandboxImage `json:"image,omitempty" jsonschema:"what the sandbox was made from, unless a snapshot"`
	SnapshotID string            `json:"snapshot_id,omitempty" jsonschema:"the snapshot the sandbox was made from, if it was"`
}

// OpenSandboxStatus is a sandbox's state in OpenSandbox's words.
type OpenSandboxStatus struct {
	State   string `json:"state" jsonschema:"Running or Paused"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// OpenSandboxImage names what a sandbox was made from.
type OpenSandboxImage struct {
	Image string `json:"image" jsonschema:"the OCI image reference or the template name the sandbox was created from"`
}

// openSandboxOf is i, read from OpenSandbox's lifecycle API, as
// OpenSandbox's MCP server gives it.
func openSandboxOf(i *sdk.OpenSandboxInfo) OpenSandboxInfo {
	out := OpenSandboxInfo{OpenSandboxFields: OpenSandboxFields{
		ID: i.ID, Status: OpenSandboxStatus{State: i.State, Reason: i.Reason, Message: i.Message},
		Entrypoint: i.Entrypoint, CreatedAt: i.CreatedAt, SnapshotID: i.SnapshotID,
	}, Metadata: i.Metadata}
	if out.Entrypoint == nil {
		out.Entrypoint = []string{}
	}
	if !i.ExpiresAt.IsZero() {
		out.ExpiresAt = &i.ExpiresAt
	}
	if i.Image != "" {
		out.Image = &OpenSandboxImage{Image: i.Image}
	}
	return out
}

// openSandboxInfo reads sandbox id through OpenSandbox's lifecycle API,
// which keeps what E2B's record of a sandbox lacks: the image reference
// it was made from, its entrypoint. Callers have found the sandbox
// through E2B's API first: not found here means a server without the
// lifecycle API, or a sandbox killed in between.
func openSandboxInfo(ctx context.Context, c *sdk.Client, id string) (*sdk.OpenSandboxInfo, error) {
	info, err := c.GetOpenSandboxInfo(ctx, id)
	if errors.Is(err, sdk.ErrNotFound) {
		return nil, fmt.Errorf("%w (killed just now, or this hutch serve does not answer OpenSandbox's lifecycle API, /v1, which describes a sandbox as OpenSandbox does)", err)
	}
	if err != nil {
		return nil, opFailed(err, id)
	}
	return info, nil
}

// StatusOutput is the result of OpenSandbox's tools that report only
// that they did it.
type StatusOutput struct {
	Status string `json:"status" jsonschema:"what was done: created, deleted, moved"`
}

// conflict fails a call that names one thing in both shapes.
func conflict(hutch string, hutchSet bool, osb string, osbSet bool) error {
	if hutchSet && osbSet {
		return fmt.Errorf("%s and %s name the same thing (Hutch's name and OpenSandbox's): give one of them", hutch, osb)
	}
	return nil
}

// seconds turns a number of seconds, whole or not, into a duration;
// 0 means "not given".
func seconds(name string, s float64, most time.Duration) (time.Duration, error) {
	d := time.Duration(s * float64(time.Second))
	if s < 0 || d > most {
		return 0, fmt.Errorf("%s must be between 1 and %d, got %v", name, int(most/time.Second), s)
	}
	return d, nil
}

// fileMode reads OpenSandbox's modes: the decimal digits of the octal
// permissions, 755 for rwxr-xr-x (and 4755 with the setuid bit).
func fileMode(m int) (os.FileMode, error) {
	v, err := strconv.ParseUint(strconv.Itoa(m), 8, 32)
	if err != nil || m < 0 || v > 0o7777 {
		return 0, fmt.Errorf("mode %d is not a mode: write the octal permissions as decimal digits, e.g. 644 or 755", m)
	}
	return os.FileMode(v), nil
}

// setAttributes gives the entry at p (absolute) its owner, group and
// mode, as root, with chown and chmod run as argv, never through a
// shell: envd's file API sets neither.
func setAttributes(ctx context.Context, sbx *sdk.Sandbox, p string, mode *os.FileMode, owner, group string) error {
	var cmds [][]string
	if owner != "" || group != "" {
		spec := owner
		if group != "" {
			spec += ":" + group
		}
		cmds = append(cmds, []string{"/bin/chown", "--", spec, p})
	}
	// After chown, which may clear setuid and setgid bits.
	if mode != nil {
		cmds = append(cmds, []string{"/bin/chmod", "--", fmt.Sprintf("%o", *mode), p})
	}
	for _, argv := range cmds {
		_, err := sbx.Commands.Exec(ctx, argv, &sdk.RunOptions{User: "root", Timeout: 30 * time.Second, MaxOutput: 64 << 10})
		var exit *sdk.CommandExitError
		if errors.As(err, &exit) {
			return fmt.Errorf("%s %s: %s", argv[0], p, strings.TrimSpace(exit.Stderr))
		}
		if err != nil {
			return fmt.Errorf("set the owner and mode of %s: %w", p, err)
		}
	}
	return nil
}

// textEncoding returns the encoding a Python codec name names, nil for
// UTF-8 (the default, and Go's own).
func textEncoding(name string) (encoding.Encoding, error) {
	n := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(name)), "_", "-")
	switch n {
	case "", "utf-8", "utf8", "u8", "utf":
		return nil, nil
	case "latin-1", "latin1", "l1", "iso-8859-1", "iso8859-1", "8859":
		return charmap.ISO8859_1, nil
	case "ascii", "us-ascii", "646":
		n = "us-ascii"
	}
	if rest, ok := strings.CutPrefix(n, "cp"); ok {
		if _, err := strconv.Atoi(rest); err == nil && strings.HasPrefix(rest, "125") {
			n = "windows-" + rest
		}
	}
	for _, try := range []string{n, strings.ReplaceAll(n, "-", "_"), strings.ReplaceAll(n, "-", "")} {
		if e, err := ianaindex.IANA.Encoding(try); err == nil && e != nil {
			return e, nil
		}
	}
	return nil, fmt.Errorf("encoding %q is not one this server knows: use utf-8, latin-1, ascii or an IANA charset name (text and base64 are Hutch's)", name)
}

// decodeText decodes data in enc (nil: UTF-8), refusing what is not text
// in it, as Python's decode does.
func decodeText(data []byte, enc encoding.Encoding, name string) (string, error) {
	if enc == nil {
		if !utf8.Valid(data) {
			return "", fmt.Errorf("the content is not valid %s text: read it with encoding base64 (Hutch's), or a byte range that does not cut a character", name)
		}
		return string(data), nil
	}
	out, err := enc.NewDecoder().Bytes(data)
	if err != nil {
		return "", fmt.Errorf("the content is not valid %s text: %w", name, err)
	}
	return string(out), nil
}

// encodeText encodes s in enc (nil: UTF-8).
func encodeText(s string, enc encoding.Encoding, name string) ([]byte, error) {
	if enc == nil {
		return []byte(s), nil
	}
	out, err := enc.NewEncoder().Bytes([]byte(s))
	if err != nil {
		return nil, fmt.Errorf("content cannot be written in %s: %w", name, err)
	}
	return out, nil
}

// byteRange reads an HTTP Range header of one range, "bytes=a-b",
// "bytes=a-" or "bytes=-n", against a file of size bytes: the offset and
// length it names, cut at the file's end.
func byteRange(h string, size int64) (offset, length int64, err error) {
	bad := fmt.Errorf("range_header %q is not a byte range: bytes=FIRST-LAST, bytes=FIRST- or bytes=-SUFFIX (one range; first byte 0)", h)
	spec, ok := strings.CutPrefix(strings.TrimSpace(h), "bytes=")
	first, last, dash := strings.Cut(spec, "-")
	if !ok || !dash || strings.Contains(spec, ",") {
		return 0, 0, bad
	}
	num := func(s string) (int64, bool) {
		v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		return v, err == nil && v >= 0
	}
	switch {
	case first == "":
		n, ok := num(last)
		if !ok || n == 0 {
			return 0, 0, bad
		}
		n = min(n, size)
		offset, length = size-n, n
	case last == "":
		a, ok := num(first)
		if !ok {
			return 0, 0, bad
		}
		offset, length = a, size-a
	default:
		a, okA := num(first)
		b, okB := num(last)
		if !okA || !okB || b < a {
			return 0, 0, bad
		}
		offset, length = a, min(b, size-1)-a+1
	}
	if offset >= size || length <= 0 {
		return 0, 0, fmt.Errorf("range_header %q starts at or past the end of the file (%d bytes)", h, size)
	}
	return offset, length, nil
}

// dropNulls removes the null values from the arguments of tool calls,
// at any depth of objects, before the schemas judge them: OpenSandbox's
// schemas take null for "not given" (its clients send it), Hutch's
// single-typed ones say the same by leaving the argument out.
func dropNulls(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if call, ok := req.(*mcp.CallToolRequest); ok && call.Params != nil && len(call.Params.Arguments) > 0 {
			var args any
			if json.Unmarshal(call.Params.Arguments, &args) == nil {
				if cleaned, changed := withoutNulls(args); changed {
					if b, err := json.Marshal(cleaned); err == nil {
						call.Params.Arguments = b
					}
				}
			}
		}
		return next(ctx, method, req)
	}
}

func withoutNulls(v any) (any, bool) {
	changed := false
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if e == nil {
				delete(v, k)
				changed = true
				continue
			}
			var c bool
			v[k], c = withoutNulls(e)
			changed = changed || c
		}
	case []any:
		for i, e := range v {
			var c bool
			v[i], c = withoutNulls(e)
			changed = changed || c
		}
	}
	return v, changed
}

// addShapedTool registers a tool whose result follows the shape of its
// call: Hutch's H or OpenSandbox's O. Its output schema has the
// properties of both, none required (which of them come depends on the
// call).
func addShapedTool[In, H, O any](srv *mcp.Server, t *mcp.Tool, h mcp.ToolHandlerFor[In, any]) {
	in, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("tool %s: %v", t.Name, err))
	}
	singleTypes(in)
	out := &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{}}
	for _, s := range []func() (*jsonschema.Schema, error){
		func() (*jsonschema.Schema, error) { return jsonschema.For[H](nil) },
		func() (*jsonschema.Schema, error) { return jsonschema.For[O](nil) },
	} {
		schema, err := s()
		if err != nil {
			panic(fmt.Sprintf("tool %s: %v", t.Name, err))
		}
		singleTypes(schema)
		for _, k := range slices.Sorted(maps.Keys(schema.Properties)) {
			p := schema.Properties[k]
			if q, dup := out.Properties[k]; dup && !reflect.DeepEqual(p, q) {
				panic(fmt.Sprintf("tool %s: the shapes' %q differ", t.Name, k)) // a programming error, found by any test
			}
			out.Properties[k] = p
		}
	}
	t.InputSchema, t.OutputSchema = in, out
	mcp.AddTool(srv, t, h)
}

// both is the result of a call in neither shape: Hutch's result and
// OpenSandbox's in one object, so that a client of either server reads
// it. Where both have a key, Hutch's value is kept.
func both(hutch, osb any) (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	for _, v := range []any{osb, hutch} {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, err
		}
		maps.Copy(out, m)
	}
	return out, nil
}
