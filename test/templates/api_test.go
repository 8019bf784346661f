package templates

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testenv"
	"github.com/hutch-sandbox/hutch/internal/testenv/ocitest"
	"github.com/hutch-sandbox/hutch/sdk"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// api sends a request to the server's REST API with the test key and
// returns the status and body. in, when not nil, is sent as JSON.
func (e *env) api(method, path string, in any) (int, []byte) {
	e.t.Helper()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			e.t.Fatal(err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(e.t.Context(), method, e.srv.URL()+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("X-API-KEY", hutchtest.TestKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp.StatusCode, out
}

// requestBuild is POST /v3/templates for ref: the build's template and
// build ids.
func (e *env) requestBuild(ref string) (templateID, buildID string) {
	e.t.Helper()
	code, body := e.api("POST", "/v3/templates", map[string]any{"name": ref})
	var out struct {
		TemplateID string `json:"templateID"`
		BuildID    string `json:"buildID"`
	}
	if code != http.StatusAccepted || json.Unmarshal(body, &out) != nil {
		e.t.Fatalf("POST /v3/templates %s: %d %s", ref, code, body)
	}
	return out.TemplateID, out.BuildID
}

// buildStatus is GET .../status of a build.
type buildStatus struct {
	Status string `json:"status"`
	Reason *struct {
		Message string `json:"message"`
		Step    string `json:"step"`
	} `json:"reason"`
}

// waitBuild polls a build's status until it is ready or error.
func (e *env) waitBuild(templateID, buildID string) buildStatus {
	e.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		code, body := e.api("GET", "/templates/"+templateID+"/builds/"+buildID+"/status", nil)
		var st buildStatus
		if code != http.StatusOK || json.Unmarshal(body, &st) != nil {
			e.t.Fatalf("build status: %d %s", code, body)
		}
		if st.Status == "ready" || st.Status == "error" {
			return st
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("build %s still %s after two minutes", buildID, st.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// noTemplate fails the test if template name, or any build of it, is in
// the machine's store.
func noTemplate(t *testing.T, name string) {
	t.Helper()
	if registered(t, name) || len(buildsOf(t, name)) != 0 {
		t.Errorf("%s is registered (builds %v) after a failed build", name, buildsOf(t, name))
	}
}

// escapes are where an entry climbing out of a layer being unpacked
// (<store>/layers/.new-*/rootfs) would land, for each entry the hostile
// layers write: "etc/evil" and "etc/shadow" 0 to 7 levels up.
func escapes(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, name := range []string{"etc/evil", "evil", "shadow"} {
		for up := 1; up <= 7; up++ {
			p := filepath.Join(testenv.TemplatesDir(), "layers", ".new-x", "rootfs", strings.Repeat("../", up), name)
			if !strings.Contains(p, ".new-x") {
				out = append(out, p)
			}
		}
	}
	// Nor any layer of the store, under the name the entry was given.
	more, _ := filepath.Glob(filepath.Join(testenv.TemplatesDir(), "layers", "*", "etc", "evil"))
	return append(out, more...)
}

// TestHostileImage builds from images an attacker would serve, each
// pushed to a registry on loopback: the build fails at its base step
// with a reason naming the entry, registers nothing and writes nothing
// outside the store.
func TestHostileImage(t *testing.T) {
	e := newEnv(t)
	reg := ocitest.StartRegistry(t)
	var shadow syscall.Stat_t
	if err := syscall.Stat("/etc/shadow", &shadow); err != nil {
		t.Fatal(err)
	}
	for _, tc := range hutchtest.HostileImages() {
		t.Run(tc.Name, func(t *testing.T) {
			ref := reg + "/hostile/" + tc.Name + ":1"
			// The hostile layer alone: a sound layer below it would be
			// kept in the store (a retry resumes after it).
			ocitest.Push(t, ref, ocitest.Image(t, ocitest.ImageConfig{}, tc.Layer(t)))
			name := e.name(tc.Name)
			_, err := e.client.BuildTemplate(t.Context(), sdk.TemplateBuild{
				Name: name, FromImage: ref, Steps: []sdk.TemplateStep{{Type: "RUN", Args: []string{"true"}}},
			})
			var be *sdk.BuildError
			if !errors.As(err, &be) || be.Step != "base" || !strings.Contains(be.Message, tc.Refusal) {
				t.Errorf("build from %s: %v\nwant a build error at step base saying %s", ref, err, tc.Refusal)
			}
			noTemplate(t, name)
			for _, p := range escapes(t) {
				if exists(t, p) {
					t.Errorf("%s was written outside the layer", p)
				}
			}
			var now syscall.Stat_t
			if err := syscall.Stat("/etc/shadow", &now); err != nil || now.Nlink != shadow.Nlink {
				t.Errorf("/etc/shadow has %d links, had %d: a layer links to it", now.Nlink, shadow.Nlink)
			}
		})
	}
}

// TestBuildAPIErrors sends the template build API what a broken or
// hostile client would: each is refused with a clear error naming the
// step, and nothing is registered.
func TestBuildAPIErrors(t *testing.T) {
	e := newEnv(t)
	image := pushBusybox(t)

	t.Run("run-fails", func(t *testing.T) {
		e := e.with(t)
		name := e.name("run-fails")
		tid, bid := e.requestBuild(name)
		code, body := e.api("POST", "/v2/templates/"+tid+"/builds/"+bid, map[string]any{
			"fromImage": image,
			"steps": []map[string]any{
				{"type": "RUN", "args": []string{"echo one"}},
				{"type": "RUN", "args": []string{"echo about to fail >&2; exit 3"}},
				{"type": "RUN", "args": []string{"echo never"}},
			},
		})
		if code != http.StatusAccepted {
			t.Fatalf("start build: %d %s", code, body)
		}
		st := e.waitBuild(tid, bid)
		if st.Status != "error" || st.Reason == nil || st.Reason.Step != "2" || !strings.Contains(st.Reason.Message, "exited with code 3") {
			t.Errorf("build with a failing step 2: %+v (reason %+v); want status error, reason step 2, exited with code 3", st, st.Reason)
		}
		noTemplate(t, name)
	})

	t.Run("unknown-from-template", func(t *testing.T) {
		e := e.with(t)
		name := e.name("no-base")
		missing := e.name("missing")
		_, err := e.client.BuildTemplate(t.Context(), sdk.TemplateBuild{Name: name, FromTemplate: missing,
			Steps: []sdk.TemplateStep{{Type: "RUN", Args: []string{"true"}}}})
		var be *sdk.BuildError
		if !errors.As(err, &be) || be.Step != "base" || !strings.Contains(be.Message, fmt.Sprintf("template %q does not exist", missing)) {
			t.Errorf("build from template %s: %v; want a build error at step base saying it does not exist", missing, err)
		}
		noTemplate(t, name)
	})

	t.Run("concurrent", func(t *testing.T) {
		e := e.with(t)
		name := e.name("busy")
		tid, first := e.requestBuild(name)
		_, waiting := e.requestBuild(name) // only requested: no conflict yet
		start := map[string]any{"fromImage": image, "steps": []map[string]any{{"type": "RUN", "args": []string{"sleep 3"}}}}
		if code, body := e.api("POST", "/v2/templates/"+tid+"/builds/"+first, start); code != http.StatusAccepted {
			t.Fatalf("start the first build: %d %s", code, body)
		}
		// While it runs, another build of the name is refused, requested
		// or started.
		code, body := e.api("POST", "/v3/templates", map[string]any{"name": name})
		if code != http.StatusConflict || !strings.Contains(string(body), "is being built") {
			t.Errorf("request a second build of %s while one runs: %d %s; want 409, is being built", name, code, body)
		}
		code, body = e.api("POST", "/v2/templates/"+tid+"/builds/"+waiting, start)
		if code != http.StatusConflict || !strings.Contains(string(body), "is being built") {
			t.Errorf("start a second build of %s while one runs: %d %s; want 409, is being built", name, code, body)
		}
		if st := e.waitBuild(tid, first); st.Status != "ready" {
			t.Fatalf("the first build: %+v (reason %+v)", st, st.Reason)
		}
		// Once it is done, another build may run.
		if code, body := e.api("POST", "/v3/templates", map[string]any{"name": name}); code != http.StatusAccepted {
			t.Errorf("request a build of %s after the first ended: %d %s", name, code, body)
		}
	})
}

// TestUploadErrors PUTs COPY archives to the signed upload URL that are
// not whole tar archives, or whose Content-Length does not match: each
// is refused with 400 and the archive is not present afterwards.
func TestUploadErrors(t *testing.T) {
	e := newEnv(t)
	name := e.name("uploads")
	var whole bytes.Buffer
	tw := tar.NewWriter(&whole)
	content := bytes.Repeat([]byte("0123456789abcdef"), 4096)
	if err := tw.WriteHeader(&tar.Header{Name: "big.bin", Mode: 0o644, Size: int64(len(content))}); err != nil {
		t.Fatal(err)
	}
	tw.Write(content)
	tw.Close()
	for _, tc := range []struct {
		name string
		body []byte
		// length is the Content-Length sent; -1 for len(body).
		length int
	}{
		{"not-a-tar", bytes.Repeat([]byte("this is not a tar archive\n"), 100), -1},
		{"truncated", whole.Bytes()[:whole.Len()/2], -1},
		{"length-longer-than-body", whole.Bytes(), whole.Len() + 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.with(t)
			sum := sha256.Sum256(append([]byte(tc.name), tc.body...))
			hash := hex.EncodeToString(sum[:])
			present := func() (bool, string) {
				code, body := e.api("GET", "/templates/"+name+"/files/"+hash, nil)
				var link struct {
					Present bool   `json:"present"`
					URL     string `json:"url"`
				}
				if code != http.StatusCreated || json.Unmarshal(body, &link) != nil {
					t.Fatalf("GET files/%s: %d %s", hash, code, body)
				}
				return link.Present, link.URL
			}
			ok, link := present()
			if ok || link == "" {
				t.Fatalf("files/%s: present %v, url %q before any upload", hash, ok, link)
			}
			length := tc.length
			if length < 0 {
				length = len(tc.body)
			}
			code, body := rawPut(t, link, tc.body, length)
			if code != http.StatusBadRequest {
				t.Errorf("PUT %d bytes with Content-Length %d: %d %s; want 400", len(tc.body), length, code, body)
			}
			if ok, _ := present(); ok {
				t.Errorf("files/%s is present after a refused upload", hash)
			}
			if _, err := os.Stat(filepath.Join(testenv.TemplatesDir(), "files", hash)); err == nil {
				t.Errorf("files/%s is in the store after a refused upload", hash)
			}
		})
	}
	// The whole archive is taken.
	sum := sha256.Sum256(whole.Bytes())
	hash := hex.EncodeToString(sum[:])
	t.Cleanup(func() { os.Remove(filepath.Join(testenv.TemplatesDir(), "files", hash)) })
	_, body := e.api("GET", "/templates/"+name+"/files/"+hash, nil)
	var link struct {
		URL string `json:"url"`
	}
	json.Unmarshal(body, &link)
	if code, body := rawPut(t, link.URL, whole.Bytes(), whole.Len()); code != http.StatusOK {
		t.Errorf("PUT the whole archive: %d %s", code, body)
	}
}

// rawPut sends body to link with the Content-Length given, whatever the
// body's length, over a connection of its own, closing its side once
// the body is sent; it returns the status and body of the answer.
func rawPut(t *testing.T, link string, body []byte, length int) (int, string) {
	t.Helper()
	u, err := url.Parse(link)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "PUT %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", u.RequestURI(), u.Host, length)
	conn.Write(body)
	conn.(*net.TCPConn).CloseWrite()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("PUT %s: %v", link, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
