package osbexecd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// sdkUpload is one WriteEntry of the Python SDK.
type sdkUpload struct {
	path         string
	data         string
	mode         int
	owner, group *string
}

// metadataJSON is the metadata part as Python's json.dumps writes it.
func (u sdkUpload) metadataJSON() string {
	js := func(s *string) string {
		if s == nil {
			return "null"
		}
		b, _ := json.Marshal(*s)
		return string(b)
	}
	p, _ := json.Marshal(u.path)
	return fmt.Sprintf(`{"path": %s, "owner": %s, "group": %s, "mode": %d}`, p, js(u.owner), js(u.group), u.mode)
}

// uploadChunked sends entries as FilesystemAdapter._write_files_chunked
// does: a chunked body, metadata then file for each entry, the file part
// named by the path's base name.
func (hs *harness) uploadChunked(entries ...sdkUpload) (int, []byte) {
	hs.t.Helper()
	boundary := "opensandbox_0123456789abcdef_1700000000"
	var b bytes.Buffer
	for _, e := range entries {
		fmt.Fprintf(&b, "--%s\r\n", boundary)
		b.WriteString("Content-Disposition: form-data; name=\"metadata\"; filename=\"metadata\"\r\n")
		b.WriteString("Content-Type: application/json\r\n\r\n")
		b.WriteString(e.metadataJSON())
		b.WriteString("\r\n")
		fmt.Fprintf(&b, "--%s\r\n", boundary)
		name := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\r", "_", "\n", "_").Replace(filepath.Base(e.path)) // _multipart_header_filename
		fmt.Fprintf(&b, "Content-Disposition: form-data; name=\"file\"; filename=\"%s\"\r\n", name)
		b.WriteString("Content-Type: text/plain; charset=utf-8\r\n\r\n")
		b.WriteString(e.data)
		b.WriteString("\r\n")
	}
	fmt.Fprintf(&b, "--%s--\r\n", boundary)
	// An io.Reader of unknown length: the client sends it chunked.
	status, _, body := hs.do("POST", "/files/upload", http.Header{"Content-Type": {"multipart/form-data; boundary=" + boundary}}, io.MultiReader(&b))
	return status, body
}

// uploadFiles sends entries as _write_files_with_content_length does
// (httpx files=): the file part named by the full path.
func (hs *harness) uploadFiles(entries ...sdkUpload) (int, []byte) {
	hs.t.Helper()
	boundary := "d2b1c7d9a0b54c3b9f0e5c7a8e6f4d21"
	var b bytes.Buffer
	for _, e := range entries {
		name := strings.NewReplacer(`\`, `\\`, `"`, "%22", "\r", "%0D", "\n", "%0A").Replace(e.path) // httpx's _format_form_param
		fmt.Fprintf(&b, "--%s\r\nContent-Disposition: form-data; name=\"metadata\"; filename=\"metadata\"\r\nContent-Type: application/json\r\n\r\n%s\r\n", boundary, e.metadataJSON())
		fmt.Fprintf(&b, "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\"\r\nContent-Type: application/octet-stream\r\n\r\n%s\r\n", boundary, name, e.data)
	}
	fmt.Fprintf(&b, "--%s--\r\n", boundary)
	status, _, body := hs.do("POST", "/files/upload", http.Header{"Content-Type": {"multipart/form-data; boundary=" + boundary}}, bytes.NewReader(b.Bytes()))
	return status, body
}

// rawUpload sends a hand-made multipart body.
func (hs *harness) rawUpload(body string) (int, []byte) {
	hs.t.Helper()
	status, _, b := hs.do("POST", "/files/upload", http.Header{"Content-Type": {"multipart/form-data; boundary=B"}}, strings.NewReader(body))
	return status, b
}

func sp(s string) *string { return &s }

func TestUpload(t *testing.T) {
	hs := newHarness(t, Options{MaxUploadBytes: 64 << 10})
	t.Run("SDK forms with metadata", func(t *testing.T) {
		for _, send := range []struct {
			name string
			fn   func(...sdkUpload) (int, []byte)
		}{{"chunked", hs.uploadChunked}, {"files", hs.uploadFiles}} {
			dir := "/tmp/up-" + send.name
			status, body := send.fn(
				sdkUpload{path: dir + "/a/script.sh", data: "#!/bin/sh\necho hi\n", mode: 755},
				sdkUpload{path: dir + "/b/secret.txt", data: "s3cret", mode: 600, owner: sp("user"), group: sp("user")},
				sdkUpload{path: dir + "/odd name \"q\" é.txt", data: "", mode: 644},
			)
			if status != 200 {
				t.Fatalf("%s upload: %d %s", send.name, status, body)
			}
			got := hs.mustSh(fmt.Sprintf(`cd %s && stat -c '%%n %%a %%U %%G %%s' a/script.sh b/secret.txt 'odd name "q" é.txt' && cat b/secret.txt && ./a/script.sh`, dir))
			want := "a/script.sh 755 root root 18\nb/secret.txt 600 user user 6\nodd name \"q\" é.txt 644 root root 0\ns3crethi\n"
			if got != want {
				t.Errorf("%s upload wrote\n%s\nwant\n%s", send.name, got, want)
			}
		}
	})
	t.Run("overwrite keeps the path", func(t *testing.T) {
		hs.mustSh("printf old > /tmp/over.txt && chmod 640 /tmp/over.txt")
		if status, body := hs.uploadChunked(sdkUpload{path: "/tmp/over.txt", data: "new", mode: 0}); status != 200 {
			t.Fatalf("%d %s", status, body)
		}
		if got := hs.mustSh("stat -c %a /tmp/over.txt; cat /tmp/over.txt"); got != "640\nnew" {
			t.Errorf("mode 0 must keep the mode: %q", got)
		}
	})

	// Every refusal leaves the targets as they were: none is created.
	meta := func(path string, mode int) string {
		return fmt.Sprintf("--B\r\nContent-Disposition: form-data; name=\"metadata\"\r\n\r\n{\"path\": %q, \"mode\": %d}\r\n", path, mode)
	}
	file := func(data string) string {
		return "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\n" + data + "\r\n"
	}
	const end = "--B--\r\n"
	tests := []struct {
		name   string
		body   string
		status int
		code   string
	}{
		{"bad JSON in the second pair", meta("/tmp/bad1", 644) + file("one") + "--B\r\nContent-Disposition: form-data; name=\"metadata\"\r\n\r\n{nope\r\n" + file("two") + end, 400, codeInvalidMetadata},
		{"bad mode", meta("/tmp/bad1", 644) + file("one") + meta("/tmp/bad2", 789) + file("two") + end, 400, codeInvalidRequest},
		{"unknown owner", meta("/tmp/bad1", 644) + file("one") + "--B\r\nContent-Disposition: form-data; name=\"metadata\"\r\n\r\n{\"path\": \"/tmp/bad2\", \"owner\": \"nosuchuser\"}\r\n" + file("two") + end, 400, codeInvalidRequest},
		{"owner with a colon", "--B\r\nContent-Disposition: form-data; name=\"metadata\"\r\n\r\n{\"path\": \"/tmp/bad1\", \"owner\": \"a:b\"}\r\n" + file("one") + end, 400, codeInvalidRequest},
		{"file without metadata", file("one") + end, 400, codeInvalidMetadata},
		{"metadata without file", meta("/tmp/bad1", 644) + file("one") + meta("/tmp/bad2", 644) + end, 400, codeInvalidContent},
		{"empty path", meta("", 644) + file("one") + end, 400, codeInvalidMetadata},
		{"same path twice", meta("/tmp/bad1", 644) + file("one") + meta("/tmp/bad1", 644) + file("two") + end, 400, codeInvalidFile},
		{"no parts", end, 400, codeInvalidFile},
		{"cut short", meta("/tmp/bad1", 644) + file("one") + meta("/tmp/bad2", 644) + "--B\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nhalf", 400, codeInvalidFile},
		{"too large", meta("/tmp/bad1", 644) + file("one") + meta("/tmp/bad2", 644) + file(strings.Repeat("x", 70<<10)) + end, 413, codeTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := hs.rawUpload(tt.body)
			wantError(t, tt.name, status, body, tt.status, tt.code)
			if out, code := hs.sh("ls /tmp/bad1 /tmp/bad2 2>/dev/null"); code == 0 || out != "" {
				t.Errorf("a refused upload wrote %q", out)
			}
		})
	}
	// A filename Go's parser refuses (a raw quote) does not hide the part.
	status, body := hs.rawUpload(meta("/tmp/lenient", 644) + "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"we\"ird\"\r\n\r\nok\r\n" + end)
	if status != 200 || hs.mustSh("cat /tmp/lenient") != "ok" {
		t.Errorf("upload with an odd filename: %d %s", status, body)
	}
	status, _, body = hs.do("POST", "/files/upload", jsonHeader(), strings.NewReader("{}"))
	wantError(t, "not multipart", status, body, 400, codeInvalidFile)
}

func TestDownload(t *testing.T) {
	hs := newHarness(t, Options{})
	hs.mustSh("printf 0123456789 > /tmp/ten && printf 'l1\\nl2\\nl3\\nl4' > /tmp/lines && mkdir -p /tmp/dir && : > /tmp/empty")
	tests := []struct {
		name, query, rangeHdr string
		status                int
		body, contentRange    string
		code                  string
	}{
		{name: "whole", query: "?path=/tmp/ten", status: 200, body: "0123456789"},
		{name: "empty file", query: "?path=/tmp/empty", status: 200, body: ""},
		{name: "range", query: "?path=/tmp/ten", rangeHdr: "bytes=2-4", status: 206, body: "234", contentRange: "bytes 2-4/10"},
		{name: "open range", query: "?path=/tmp/ten", rangeHdr: "bytes=7-", status: 206, body: "789", contentRange: "bytes 7-9/10"},
		{name: "suffix range", query: "?path=/tmp/ten", rangeHdr: "bytes=-3", status: 206, body: "789", contentRange: "bytes 7-9/10"},
		{name: "range past the end is cut", query: "?path=/tmp/ten", rangeHdr: "bytes=8-100", status: 206, body: "89", contentRange: "bytes 8-9/10"},
		{name: "first of several ranges", query: "?path=/tmp/ten", rangeHdr: "bytes=0-1, 5-6", status: 206, body: "01", contentRange: "bytes 0-1/10"},
		{name: "unsatisfiable", query: "?path=/tmp/ten", rangeHdr: "bytes=20-30", status: 416, code: codeRangeInvalid},
		{name: "bad range", query: "?path=/tmp/ten", rangeHdr: "bytes=a-b", status: 400, code: codeInvalidRequest},
		{name: "backwards range", query: "?path=/tmp/ten", rangeHdr: "bytes=5-2", status: 400, code: codeInvalidRequest},
		{name: "not bytes", query: "?path=/tmp/ten", rangeHdr: "items=0-1", status: 400, code: codeInvalidRequest},
		{name: "lines", query: "?path=/tmp/lines&offset=2&limit=2", status: 200, body: "l2\nl3\n"},
		{name: "last line without newline", query: "?path=/tmp/lines&offset=3&limit=9", status: 200, body: "l3\nl4"},
		{name: "lines past the end", query: "?path=/tmp/lines&offset=9&limit=2", status: 200, body: ""},
		{name: "offset alone", query: "?path=/tmp/lines&offset=2", status: 400, code: codeInvalidRequest},
		{name: "offset 0", query: "?path=/tmp/lines&offset=0&limit=1", status: 400, code: codeInvalidRequest},
		{name: "lines and range", query: "?path=/tmp/lines&offset=1&limit=1", rangeHdr: "bytes=0-1", status: 400, code: codeInvalidRequest},
		{name: "no path", query: "", status: 400, code: codeMissingQuery},
		{name: "missing file", query: "?path=/tmp/nope", status: 404, code: codeFileNotFound},
		{name: "directory", query: "?path=/tmp/dir", status: 400, code: codeInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.rangeHdr != "" {
				h.Set("Range", tt.rangeHdr)
			}
			status, hdr, body := hs.do("GET", "/files/download"+tt.query, h, nil)
			if tt.code != "" {
				wantError(t, tt.name, status, body, tt.status, tt.code)
				return
			}
			if status != tt.status || string(body) != tt.body {
				t.Fatalf("%d %q, want %d %q", status, body, tt.status, tt.body)
			}
			if tt.contentRange != "" && hdr.Get("Content-Range") != tt.contentRange {
				t.Errorf("Content-Range %q, want %q", hdr.Get("Content-Range"), tt.contentRange)
			}
			if tt.rangeHdr == "" && !strings.Contains(tt.query, "offset") {
				if hdr.Get("Content-Length") != fmt.Sprint(len(tt.body)) || !strings.HasPrefix(hdr.Get("Content-Disposition"), "attachment;") {
					t.Errorf("headers %v", hdr)
				}
			}
		})
	}
}

// TestTraversal: paths are the sandbox's, whatever they say. A file only
// the host has is out of reach by "..", by its own absolute path and
// through a link made in the sandbox; writes stay in the sandbox.
func TestTraversal(t *testing.T) {
	hs := newHarness(t, Options{})
	hostDir := t.TempDir()
	secret := filepath.Join(hostDir, "host-secret")
	if err := os.WriteFile(secret, []byte("host only"), 0o600); err != nil {
		t.Fatal(err)
	}
	hs.mustSh("ln -s " + secret + " /tmp/to-host && ln -s ../../../../../../.. /tmp/up")
	hostShadow, _ := os.ReadFile("/etc/shadow")
	for _, p := range []string{
		secret,
		"../../../../../../../.." + secret,
		"/tmp/../../.." + secret,
		"/tmp/to-host",
		"/tmp/up" + secret,
	} {
		status, _, body := hs.do("GET", "/files/download"+query("path", p), nil, nil)
		if status == 200 || strings.Contains(string(body), "host only") {
			t.Errorf("download %s: %d %q reached the host's file", p, status, body)
		}
		if status, body := hs.json("GET", "/files/info"+query("path", p), nil); status == 200 && !strings.Contains(string(body), `"type":"symlink"`) {
			t.Errorf("info %s: %d %s", p, status, body)
		}
	}
	// The sandbox's own /etc/shadow, not the host's.
	status, _, body := hs.do("GET", "/files/download"+query("path", "/tmp/../../../etc/shadow"), nil, nil)
	if status != 200 || !strings.HasPrefix(string(body), "root:") || (len(hostShadow) > 0 && bytes.Equal(body, hostShadow)) {
		t.Errorf("/etc/shadow through ..: %d, %d bytes (host's has %d)", status, len(body), len(hostShadow))
	}
	if want := hs.mustSh("cat /etc/shadow"); string(body) != want {
		t.Errorf("/etc/shadow through .. is not the sandbox's")
	}
	// Writes land in the sandbox.
	status, b := hs.uploadChunked(sdkUpload{path: "../../../../.." + hostDir + "/pwned", data: "x", mode: 644})
	if status != 200 {
		t.Fatalf("upload: %d %s", status, b)
	}
	if _, err := os.Stat(filepath.Join(hostDir, "pwned")); err == nil {
		t.Fatal("an upload wrote to the host")
	}
	if out := hs.mustSh("cat " + hostDir + "/pwned"); out != "x" {
		t.Errorf("the upload is not in the sandbox: %q", out)
	}
	status, b = hs.json("POST", "/directories", map[string]permission{"/tmp/../../.." + hostDir + "/made": {Mode: 755}})
	if _, err := os.Stat(filepath.Join(hostDir, "made")); status != 200 || err == nil {
		t.Errorf("mkdir through ..: %d %s (on host: %v)", status, b, err == nil)
	}
	status, b = hs.json("POST", "/files/mv", []renameItem{{Src: "/tmp/../.." + hostDir + "/pwned", Dest: "/../.." + hostDir + "/moved"}})
	if _, err := os.Stat(filepath.Join(hostDir, "moved")); status != 200 || err == nil {
		t.Errorf("mv through ..: %d %s (on host: %v)", status, b, err == nil)
	}
	status, b = hs.json("DELETE", "/files"+query("path", "/../.."+secret), nil)
	if _, err := os.Stat(secret); status != 200 || err != nil {
		t.Errorf("delete through ..: %d %s; the host's file: %v", status, b, err)
	}
}

func TestFileOperations(t *testing.T) {
	hs := newHarness(t, Options{})
	hs.mustSh(`set -e
mkdir -p /w/src/sub /w/empty
printf 'hello world, hello' > /w/src/a.txt
printf 'x' > /w/src/b.go
printf 'y' > /w/src/sub/c.txt
printf 'keep' > /w/src/sub/d.md
ln -s a.txt /w/src/link
chown 1000:1000 /w/src/a.txt && chmod 640 /w/src/a.txt`)

	t.Run("info", func(t *testing.T) {
		status, b := hs.json("GET", "/files/info"+query("path", "/w/src/a.txt", "path", "/w/src/sub", "path", "/w/src/link"), nil)
		var got map[string]fileInfo
		if status != 200 || json.Unmarshal(b, &got) != nil {
			t.Fatalf("%d %s", status, b)
		}
		a, sub, link := got["/w/src/a.txt"], got["/w/src/sub"], got["/w/src/link"]
		if a.Type != "file" || a.Size != 18 || a.Mode != 640 || a.Owner != "user" || a.Group != "user" || a.ModifiedAt.IsZero() || a.Path != "/w/src/a.txt" {
			t.Errorf("a.txt: %+v", a)
		}
		if sub.Type != "directory" || sub.Mode != 755 || sub.Owner != "root" {
			t.Errorf("sub: %+v", sub)
		}
		if link.Type != "symlink" || link.Mode != 777 {
			t.Errorf("link: %+v", link)
		}
		status, b = hs.json("GET", "/files/info"+query("path", "/w/src/a.txt", "path", "/w/nope"), nil)
		wantError(t, "info of a missing file", status, b, 404, codeFileNotFound)
		status, b = hs.json("GET", "/files/info", nil)
		wantError(t, "info without path", status, b, 400, codeMissingQuery)
	})

	t.Run("search", func(t *testing.T) {
		tests := []struct {
			path, pattern string
			want          []string
		}{
			{"/w/src", "*.txt", []string{"/w/src/a.txt", "/w/src/sub/c.txt"}},
			{"/w/src", "", []string{"/w/src/a.txt", "/w/src/b.go", "/w/src/link", "/w/src/sub/c.txt", "/w/src/sub/d.md"}},
			{"/w/src", "**/*.md", []string{"/w/src/sub/d.md"}},
			{"/w/src", "sub/*", []string{"/w/src/sub/c.txt", "/w/src/sub/d.md"}},
			{"/w/src", "{a,c}.txt", []string{"/w/src/a.txt", "/w/src/sub/c.txt"}},
			{"/w/src", "*.none", []string{}},
			{"/w/src/b.go", "*.go", []string{"/w/src/b.go"}},
		}
		for _, tt := range tests {
			status, b := hs.json("GET", "/files/search"+query("path", tt.path, "pattern", tt.pattern), nil)
			var got []fileInfo
			if status != 200 || json.Unmarshal(b, &got) != nil {
				t.Fatalf("search %s %q: %d %s", tt.path, tt.pattern, status, b)
			}
			paths := []string{}
			for _, f := range got {
				paths = append(paths, f.Path)
			}
			slices.Sort(paths)
			if !slices.Equal(paths, tt.want) {
				t.Errorf("search %s %q: %v, want %v", tt.path, tt.pattern, paths, tt.want)
			}
		}
		status, b := hs.json("GET", "/files/search"+query("path", "/w/src", "pattern", "[a-"), nil)
		wantError(t, "bad pattern", status, b, 400, codeInvalidRequest)
		status, b = hs.json("GET", "/files/search"+query("pattern", "*"), nil)
		wantError(t, "no path", status, b, 400, codeMissingQuery)
		status, b = hs.json("GET", "/files/search"+query("path", "/w/nope"), nil)
		wantError(t, "missing root", status, b, 404, codeFileNotFound)
	})

	t.Run("replace", func(t *testing.T) {
		hs.mustSh("printf 'a-a-a' > /w/r1 && printf 'bbb' > /w/r2 && chown 1000:1000 /w/r1 && chmod 604 /w/r1")
		status, b := hs.json("POST", "/files/replace?verbose=true", map[string]map[string]string{
			"/w/r1": {"old": "a", "new": "XY"}, "/w/r2": {"old": "zzz", "new": "q"},
		})
		var got map[string]replaceResult
		if status != 200 || json.Unmarshal(b, &got) != nil || got["/w/r1"].ReplacedCount != 3 || got["/w/r2"].ReplacedCount != 0 {
			t.Fatalf("replace: %d %s", status, b)
		}
		if out := hs.mustSh("cat /w/r1; echo; stat -c '%a %U %G' /w/r1; cat /w/r2"); out != "XY-XY-XY\n604 user user\nbbb" {
			t.Errorf("after replace: %q", out)
		}
		status, _, b2 := hs.do("POST", "/files/replace", jsonHeader(), strings.NewReader(`{"/w/r2": {"old": "b", "new": "c"}}`))
		if status != 200 || len(b2) != 0 || hs.mustSh("cat /w/r2") != "ccc" {
			t.Errorf("replace without verbose: %d %q", status, b2)
		}
		// Refusals change nothing.
		for _, tc := range []struct {
			name, body string
			status     int
			code       string
		}{
			{"empty old", `{"/w/r2": {"old": "c", "new": "d"}, "/w/r1": {"old": "", "new": "d"}}`, 400, codeInvalidRequest},
			{"missing file", `{"/w/r2": {"old": "c", "new": "d"}, "/w/zz": {"old": "c", "new": "d"}}`, 404, codeFileNotFound},
			{"directory", `{"/w/r2": {"old": "c", "new": "d"}, "/w/src": {"old": "c", "new": "d"}}`, 400, codeInvalidRequest},
			{"no new", `{"/w/r2": {"old": "c"}}`, 400, codeInvalidRequest},
			{"bad JSON", `{"/w/r2": `, 400, codeInvalidRequest},
		} {
			status, _, b := hs.do("POST", "/files/replace", jsonHeader(), strings.NewReader(tc.body))
			wantError(t, tc.name, status, b, tc.status, tc.code)
			if out := hs.mustSh("cat /w/r2"); out != "ccc" {
				t.Errorf("%s changed /w/r2 to %q", tc.name, out)
			}
		}
	})

	t.Run("permissions", func(t *testing.T) {
		hs.mustSh("printf p > /w/p1 && printf p > /w/p2")
		status, b := hs.json("POST", "/files/permissions", map[string]permission{
			"/w/p1": {Owner: "user", Group: "user", Mode: 700},
			"/w/p2": {Mode: 4755},
		})
		if status != 200 {
			t.Fatalf("%d %s", status, b)
		}
		if out := hs.mustSh("stat -c '%a %U %G' /w/p1 /w/p2"); out != "700 user user\n4755 root root\n" {
			t.Errorf("after chmod: %q", out)
		}
		for _, tc := range []struct {
			name string
			body map[string]permission
			code string
			st   int
		}{
			{"bad mode", map[string]permission{"/w/p1": {Mode: 600}, "/w/p2": {Mode: 8}}, codeInvalidRequest, 400},
			{"five digits", map[string]permission{"/w/p1": {Mode: 600}, "/w/p2": {Mode: 17777}}, codeInvalidRequest, 400},
			{"negative", map[string]permission{"/w/p1": {Mode: 600}, "/w/p2": {Mode: -1}}, codeInvalidRequest, 400},
			{"unknown group", map[string]permission{"/w/p1": {Mode: 600}, "/w/p2": {Group: "nogroup-here"}}, codeInvalidRequest, 400},
			{"missing file", map[string]permission{"/w/p1": {Mode: 600}, "/w/nope": {Mode: 600}}, codeFileNotFound, 404},
		} {
			status, b := hs.json("POST", "/files/permissions", tc.body)
			wantError(t, tc.name, status, b, tc.st, tc.code)
			if out := hs.mustSh("stat -c '%a' /w/p1"); out != "700\n" {
				t.Errorf("%s changed /w/p1 to %q", tc.name, out)
			}
		}
	})

	t.Run("move", func(t *testing.T) {
		hs.mustSh("printf m1 > /w/m1 && printf m2 > /w/m2 && printf taken > /w/taken")
		status, b := hs.json("POST", "/files/mv", []renameItem{{Src: "/w/m1", Dest: "/w/new/dir/m1"}, {Src: "/w/m2", Dest: "/w/m2b"}})
		if status != 200 {
			t.Fatalf("%d %s", status, b)
		}
		if out := hs.mustSh("cat /w/new/dir/m1 /w/m2b; ls /w/m1 /w/m2 2>&1 | wc -l"); out != "m1m22\n" {
			t.Errorf("after mv: %q", out)
		}
		for _, tc := range []struct {
			name  string
			items []renameItem
			st    int
			code  string
		}{
			{"missing source", []renameItem{{Src: "/w/m2b", Dest: "/w/m3"}, {Src: "/w/nope", Dest: "/w/x"}}, 404, codeFileNotFound},
			{"existing destination", []renameItem{{Src: "/w/m2b", Dest: "/w/m3"}, {Src: "/w/new/dir/m1", Dest: "/w/taken"}}, 409, codeAlreadyExists},
			{"empty dest", []renameItem{{Src: "/w/m2b", Dest: ""}}, 400, codeInvalidRequest},
		} {
			status, b := hs.json("POST", "/files/mv", tc.items)
			wantError(t, tc.name, status, b, tc.st, tc.code)
			if _, code := hs.sh("test -e /w/m2b && ! test -e /w/m3"); code != 0 {
				t.Errorf("%s moved /w/m2b", tc.name)
			}
		}
	})

	t.Run("delete files", func(t *testing.T) {
		hs.mustSh("printf d > /w/d1 && printf d > /w/d2 && ln -s /w/src /w/dirlink")
		status, b := hs.json("DELETE", "/files"+query("path", "/w/d1", "path", "/w/never-was"), nil)
		if status != 200 {
			t.Fatalf("%d %s", status, b)
		}
		status, b = hs.json("DELETE", "/files"+query("path", "/w/d2", "path", "/w/src"), nil)
		wantError(t, "a directory", status, b, 400, codeInvalidRequest)
		status, b = hs.json("DELETE", "/files"+query("path", "/w/dirlink"), nil)
		if status != 200 {
			t.Errorf("a link to a directory is a file to remove: %d %s", status, b)
		}
		if out := hs.mustSh("ls -d /w/d1 /w/d2 /w/dirlink /w/src 2>/dev/null; true"); out != "/w/d2\n/w/src\n" {
			t.Errorf("after delete: %q", out)
		}
		status, b = hs.json("DELETE", "/files", nil)
		wantError(t, "no path", status, b, 400, codeMissingQuery)
	})
}

func TestDirectories(t *testing.T) {
	hs := newHarness(t, Options{})
	hs.mustSh("mkdir -p /d/exists && chmod 711 /d/exists && printf f > /d/file")
	status, b := hs.json("POST", "/directories", map[string]permission{
		"/d/new/deeper/leaf": {Owner: "user", Group: "user", Mode: 700},
		"/d/exists":          {Owner: "user", Mode: 755},
		"/d/plain":           {Mode: 0},
	})
	if status != 200 {
		t.Fatalf("%d %s", status, b)
	}
	got := hs.mustSh("stat -c '%n %a %U %G' /d/new /d/new/deeper /d/new/deeper/leaf /d/exists /d/plain")
	want := "/d/new 755 user user\n/d/new/deeper 755 user user\n/d/new/deeper/leaf 700 user user\n/d/exists 711 root root\n/d/plain 755 root root\n"
	if got != want {
		t.Errorf("made\n%s\nwant\n%s", got, want)
	}
	for _, tc := range []struct {
		name string
		body map[string]permission
		st   int
		code string
	}{
		{"a file in the way", map[string]permission{"/d/ok1": {Mode: 755}, "/d/file/sub": {Mode: 755}}, 400, codeInvalidRequest},
		{"bad mode", map[string]permission{"/d/ok1": {Mode: 755}, "/d/ok2": {Mode: 999}}, 400, codeInvalidRequest},
		{"unknown owner", map[string]permission{"/d/ok1": {Mode: 755}, "/d/ok2": {Owner: "ghost"}}, 400, codeInvalidRequest},
	} {
		status, b := hs.json("POST", "/directories", tc.body)
		wantError(t, tc.name, status, b, tc.st, tc.code)
		if out, _ := hs.sh("ls -d /d/ok1 /d/ok2 2>/dev/null"); out != "" {
			t.Errorf("%s made %q", tc.name, out)
		}
	}
	status, _, b = hs.do("POST", "/directories", jsonHeader(), strings.NewReader(`{"/d/x": {"mode": "755"}}`))
	wantError(t, "mode as a string", status, b, 400, codeInvalidRequest)

	t.Run("list", func(t *testing.T) {
		hs.mustSh("mkdir -p /l/b/bb /l/a && printf 1 > /l/b/f && printf 2 > /l/c && ln -s /l/b /l/link && printf 3 > /l/b/bb/deep")
		tests := []struct {
			query string
			want  []string
		}{
			{query("path", "/l"), []string{"/l/a directory", "/l/b directory", "/l/c file", "/l/link symlink"}},
			{query("path", "/l", "depth", "2"), []string{"/l/a directory", "/l/b directory", "/l/b/bb directory", "/l/b/f file", "/l/c file", "/l/link symlink"}},
			{query("path", "/l", "depth", "0"), []string{}},
		}
		for _, tt := range tests {
			status, b := hs.json("GET", "/directories/list"+tt.query, nil)
			var got []fileInfo
			if status != 200 || json.Unmarshal(b, &got) != nil {
				t.Fatalf("list %s: %d %s", tt.query, status, b)
			}
			lines := []string{}
			for _, f := range got {
				lines = append(lines, f.Path+" "+f.Type)
			}
			if !slices.Equal(lines, tt.want) {
				t.Errorf("list %s: %v, want %v", tt.query, lines, tt.want)
			}
		}
		for _, tc := range []struct {
			name, q string
			st      int
			code    string
		}{
			{"a link", query("path", "/l/link"), 400, codeInvalidRequest},
			{"a file", query("path", "/l/c"), 400, codeInvalidRequest},
			{"missing", query("path", "/l/none"), 404, codeFileNotFound},
			{"bad depth", query("path", "/l", "depth", "-1"), 400, codeInvalidRequest},
			{"no path", "", 400, codeMissingQuery},
		} {
			status, b := hs.json("GET", "/directories/list"+tc.q, nil)
			wantError(t, tc.name, status, b, tc.st, tc.code)
		}
	})

	t.Run("remove", func(t *testing.T) {
		status, b := hs.json("DELETE", "/directories"+query("path", "/d/new", "path", "/d/never-was"), nil)
		if status != 200 {
			t.Fatalf("%d %s", status, b)
		}
		if _, code := hs.sh("test -e /d/new"); code == 0 {
			t.Error("/d/new is still there")
		}
		status, b = hs.json("DELETE", "/directories", nil)
		wantError(t, "no path", status, b, 400, codeMissingQuery)
	})
}

// TestReplaceBounds: the size of what a replacement writes is bounded as
// well as what it reads (a one-byte old and a long new multiply a file),
// over all the files of the request together, and a refusal comes before
// anything is written.
func TestReplaceBounds(t *testing.T) {
	const limit = 1 << 20
	hs := newHarness(t, Options{MaxReplaceBytes: limit})
	hs.mustSh(`set -e
mkdir -p /w
head -c 102400 /dev/zero | tr '\0' a > /w/big
head -c 307200 /dev/zero | tr '\0' a > /w/m1
cp /w/m1 /w/m2
head -c 2000000 /dev/zero | tr '\0' a > /w/huge`)
	sizes := func() string { return hs.mustSh("stat -c '%n %s' /w/big /w/m1 /w/m2 /w/huge") }
	before := sizes()
	limitText := fmt.Sprint(limit)
	tests := []struct {
		name    string
		body    map[string]map[string]string
		status  int
		code    string
		message string // a part of the message
	}{
		{"result of one file over the bound", map[string]map[string]string{"/w/big": {"old": "a", "new": strings.Repeat("b", 100)}},
			400, codeInvalidRequest, limitText},
		{"results together over the bound", map[string]map[string]string{"/w/m1": {"old": "a", "new": "bb"}, "/w/m2": {"old": "a", "new": "bb"}},
			400, codeInvalidRequest, limitText},
		{"input over the bound", map[string]map[string]string{"/w/huge": {"old": "a", "new": "b"}},
			413, codeTooLarge, limitText},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, b := hs.json("POST", "/files/replace", tt.body)
			wantError(t, tt.name, status, b, tt.status, tt.code)
			if !strings.Contains(string(b), tt.message) {
				t.Errorf("message %s does not name the limit %s", b, tt.message)
			}
			if got := sizes(); got != before {
				t.Errorf("a refused replacement changed the files:\n%s\nwant\n%s", got, before)
			}
		})
	}
	// Growing within the bound works, and says how many it replaced.
	status, b := hs.json("POST", "/files/replace?verbose=true", map[string]map[string]string{"/w/m1": {"old": "a", "new": "bb"}})
	var got map[string]replaceResult
	if status != 200 || json.Unmarshal(b, &got) != nil || got["/w/m1"].ReplacedCount != 307200 {
		t.Fatalf("replace within the bound: %d %s", status, b)
	}
	if out := hs.mustSh("stat -c %s /w/m1; tr -d b < /w/m1 | wc -c"); out != "614400\n0\n" {
		t.Errorf("after replace within the bound: %q", out)
	}
}

// TestReplaceStreams: a replacement's result goes to the sandbox as it is
// made; the host holds the files read, not what they become.
func TestReplaceStreams(t *testing.T) {
	hs := newHarness(t, Options{})
	hs.mustSh(`mkdir -p /w && head -c 4194304 /dev/zero | tr '\0' a > /w/grow`)
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	status, b := hs.json("POST", "/files/replace", map[string]map[string]string{"/w/grow": {"old": "a", "new": "bbbbbbbbbbbb"}})
	runtime.ReadMemStats(&m1)
	if status != 200 {
		t.Fatalf("replace: %d %s", status, b)
	}
	if out := hs.mustSh("stat -c %s /w/grow; tr -d b < /w/grow | wc -c"); out != "50331648\n0\n" {
		t.Errorf("after replace: %q", out)
	}
	// 4 MiB read and 48 MiB written: the host must not have built the
	// 48 MiB.
	if alloc := m1.TotalAlloc - m0.TotalAlloc; alloc > 24<<20 {
		t.Errorf("the replacement allocated %d MiB on the host for a 4 MiB file becoming 48 MiB", alloc>>20)
	}
}

// floodBody is a multipart body of metadata parts only, made as it is
// read: about size bytes of parts of a 4000-byte path each, then the
// closing boundary. read counts what the server took.
type floodBody struct {
	part, end []byte
	parts     int64 // bytes of parts
	off       int64
	read      atomic.Int64
}

func newFloodBody(size int64) *floodBody {
	path, _ := json.Marshal(map[string]string{"path": "/tmp/" + strings.Repeat("p", 4000)})
	part := []byte("--B\r\nContent-Disposition: form-data; name=\"metadata\"\r\nContent-Type: application/json\r\n\r\n" + string(path) + "\r\n")
	return &floodBody{part: part, end: []byte("--B--\r\n"), parts: size / int64(len(part)) * int64(len(part))}
}

func (f *floodBody) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		var src []byte
		switch {
		case f.off < f.parts:
			src = f.part[f.off%int64(len(f.part)):]
		case f.off < f.parts+int64(len(f.end)):
			src = f.end[f.off-f.parts:]
		}
		if len(src) == 0 {
			break
		}
		c := copy(p[n:], src)
		n += c
		f.off += int64(c)
	}
	f.read.Add(int64(n))
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// TestUploadPendingMetadata: metadata parts waiting for their file parts
// are bounded, and the upload is refused as soon as the bound is passed,
// not after the whole body was read into the host's memory.
func TestUploadPendingMetadata(t *testing.T) {
	hs := newHarness(t, Options{})
	body := newFloodBody(200 << 20)
	start := time.Now()
	status, _, b := hs.do("POST", "/files/upload", http.Header{"Content-Type": {"multipart/form-data; boundary=B"}}, body)
	wantError(t, "metadata flood", status, b, 400, codeInvalidMetadata)
	if !strings.Contains(string(b), fmt.Sprint(maxUploadFiles)) && !strings.Contains(string(b), "KiB") {
		t.Errorf("the refusal does not name the bound: %s", b)
	}
	if read := body.read.Load(); read > 32<<20 {
		t.Errorf("the server read %d MiB of metadata parts before refusing", read>>20)
	}
	t.Logf("refused after %s, %d KiB read", time.Since(start), body.read.Load()>>10)

	// Metadata parts may still come before their files (execd pairs them
	// by order), within the bound.
	meta := func(path string) string {
		return fmt.Sprintf("--B\r\nContent-Disposition: form-data; name=\"metadata\"\r\n\r\n{\"path\": %q}\r\n", path)
	}
	file := func(data string) string {
		return "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\n" + data + "\r\n"
	}
	status, b = hs.rawUpload(meta("/tmp/pair1") + meta("/tmp/pair2") + file("one") + file("two") + "--B--\r\n")
	if status != 200 {
		t.Fatalf("metadata before files: %d %s", status, b)
	}
	if got := hs.mustSh("cat /tmp/pair1 /tmp/pair2"); got != "onetwo" {
		t.Errorf("metadata before files wrote %q", got)
	}
}
