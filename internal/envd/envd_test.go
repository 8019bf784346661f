package envd_test

// envd in a real sandbox: the sandbox's root is the boundary of every path
// it serves, and /init, which sets the access token, is reachable only
// through the host's socket.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	fspb "github.com/hutch-sandbox/hutch/api/gen/filesystem"
	"github.com/hutch-sandbox/hutch/api/gen/filesystem/filesystemconnect"
	pb "github.com/hutch-sandbox/hutch/api/gen/process"
	"github.com/hutch-sandbox/hutch/api/gen/process/processconnect"
	"github.com/hutch-sandbox/hutch/internal/envdtest"
)

func TestMain(m *testing.M) { envdtest.Main(m) }

// sh runs a shell command in the sandbox as root and returns its stdout.
func sh(t *testing.T, s *envdtest.Sandbox, script string) string {
	t.Helper()
	c := processconnect.NewProcessClient(s.Client, s.URL, connect.WithProtoJSON())
	req := connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", script}}})
	req.Header().Set("Authorization", "Basic cm9vdDo=") // root:
	stream, err := c.Start(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for stream.Receive() {
		out.Write(stream.Msg().GetEvent().GetData().GetStdout())
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("%s: %v", script, err)
	}
	return out.String()
}

func TestSandboxRootIsTheBoundary(t *testing.T) {
	s := envdtest.Start(t)
	// A secret on the host, in a place that also exists inside the sandbox.
	b := make([]byte, 8)
	rand.Read(b)
	marker := hex.EncodeToString(b)
	hostDir := filepath.Join("/tmp", "hutch-boundary-"+marker)
	if err := os.MkdirAll(hostDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hostDir) })
	secret := filepath.Join(hostDir, "secret")
	if err := os.WriteFile(secret, []byte("host-secret-"+marker), 0o644); err != nil {
		t.Fatal(err)
	}
	// Links made inside the sandbox, pointing at the host's path.
	sh(t, s, "ln -s "+secret+" /home/user/file-link && ln -s "+hostDir+" /home/user/dir-link && ln -s /proc/1/root/"+secret+" /home/user/proc-link")

	reads := []string{
		secret,
		"../../../../../.." + secret,
		"/home/user/../../.." + secret,
		"/home/user/file-link",
		"/home/user/dir-link/secret",
		"/home/user/proc-link",
		"/proc/self/root" + secret,
		"/proc/1/root" + secret,
	}
	for _, p := range reads {
		resp, err := s.Client.Get(s.URL + "/files?path=" + url.QueryEscape(p))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		// 404, or 403 where the path crosses the init's /proc entries.
		if bytes.Contains(body, []byte("host-secret-")) || (resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusForbidden) {
			t.Errorf("GET /files?path=%s: %d %q; want 404 or 403 and no host content", p, resp.StatusCode, body)
		}
	}
	fs := filesystemconnect.NewFilesystemClient(s.Client, s.URL, connect.WithProtoJSON())
	for _, p := range []string{secret, "/home/user/dir-link"} {
		_, err := fs.Stat(context.Background(), connect.NewRequest(&fspb.StatRequest{Path: p}))
		if p == secret && connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("Stat(%s) = %v, want not_found", p, err)
		}
	}
	list, err := fs.ListDir(context.Background(), connect.NewRequest(&fspb.ListDirRequest{Path: "/tmp", Depth: 1}))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Msg.GetEntries() {
		if strings.Contains(e.GetName(), marker) {
			t.Errorf("the sandbox's /tmp lists the host's %s", e.GetName())
		}
	}

	// Writes through traversal or links land inside the sandbox, never on the host.
	writes := []string{
		"../../../../.." + hostDir + "/written-by-traversal",
		"/home/user/dir-link/written-through-link",
	}
	for _, p := range writes {
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		fw, _ := mw.CreateFormFile("file", p)
		fw.Write([]byte("from the sandbox"))
		mw.Close()
		resp, err := s.Client.Post(s.URL+"/files?path="+url.QueryEscape(p), mw.FormDataContentType(), &body)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	ents, _ := os.ReadDir(hostDir)
	if len(ents) != 1 {
		t.Errorf("the host's %s now holds %d entries, want only the secret: writes escaped the sandbox", hostDir, len(ents))
	}
	if got := sh(t, s, "cat "+hostDir+"/written-by-traversal"); got != "from the sandbox" {
		t.Errorf("the traversal write is not inside the sandbox: %q", got)
	}
}

func TestInitOnlyOnHostSocket(t *testing.T) {
	s := envdtest.Start(t)
	// From inside the sandbox envd answers on 49983, but not /init.
	out := sh(t, s, `curl -s -o /dev/null -w '%{http_code} ' http://127.0.0.1:49983/health; curl -s -o /dev/null -w '%{http_code}' -X POST -d '{"accessToken":"mine"}' http://127.0.0.1:49983/init`)
	fields := strings.Fields(out)
	if len(fields) != 2 || fields[0] != "204" || fields[1] == "204" {
		t.Fatalf("from inside: /health and /init answered %q; want 204 and a refusal", out)
	}
	// The token was not set: requests without one still pass.
	c := processconnect.NewProcessClient(s.Client, s.URL, connect.WithProtoJSON())
	if _, err := c.List(context.Background(), connect.NewRequest(&pb.ListRequest{})); err != nil {
		t.Errorf("List after a refused /init from inside: %v", err)
	}
}

// TestTunnelReachesOnlyTheSandboxLoopback: CONNECT on the host's socket
// reaches a port on the sandbox's own loopback and nothing else; from
// inside the sandbox, envd's TCP port does not tunnel at all.
func TestTunnelReachesOnlyTheSandboxLoopback(t *testing.T) {
	s := envdtest.Start(t)
	tests := []struct {
		target string
		want   int
	}{
		{"127.0.0.1:49983", 200}, // envd itself listens there
		{"localhost:49983", 200},
		{"127.0.0.1:1", 502}, // nothing listens
		{"10.0.0.1:80", 403}, // never onward
		{"169.254.169.254:80", 403},
		{"example.com:443", 403},
		{"127.0.0.1:0", 400},
		{"127.0.0.1:99999", 400},
		{"no-port", 400},
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			conn, err := net.Dial("unix", s.SocketPath)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", tt.target, tt.target)
			resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: http.MethodConnect})
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.want {
				t.Errorf("CONNECT %s = %s, want %d", tt.target, resp.Status, tt.want)
			}
		})
	}
	out := sh(t, s, `curl -s -o /dev/null -w '%{http_code}' -p -x http://127.0.0.1:49983 http://127.0.0.1:49983/health`)
	if out == "200" || out == "204" {
		t.Errorf("envd's TCP port inside the sandbox tunnels (CONNECT answered, then /health %s)", out)
	}
}
