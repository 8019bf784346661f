package sandbox

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/hutch-sandbox/hutch/api/gen/process"
	"github.com/hutch-sandbox/hutch/api/gen/process/processconnect"
	"github.com/hutch-sandbox/hutch/internal/envd/envdtest"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/runtime/native"
	"github.com/hutch-sandbox/hutch/internal/store"
	"github.com/hutch-sandbox/hutch/internal/template"
)

// The test binary is also each sandbox's init and envd.
func TestMain(m *testing.M) { envdtest.Main(m) }

type env struct {
	rt      *native.Runtime
	st      *store.Store
	tpl     *template.Store
	dataDir string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: namespaces, cgroups and mounts")
	}
	dir := t.TempDir()
	os.Chmod(filepath.Dir(dir), 0o711)
	templates := os.Getenv("HUTCH_TEMPLATES")
	if templates == "" {
		templates = template.DefaultDir
	}
	e := &env{tpl: template.Open(templates), dataDir: dir}
	var err error
	if e.rt, err = native.New(native.Options{DataDir: dir, Templates: e.tpl}); err != nil {
		t.Fatal(err)
	}
	if e.st, err = store.Open(context.Background(), filepath.Join(dir, "hutch.db")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.st.Close() })
	return e
}

func (e *env) manager(t *testing.T) *Manager {
	t.Helper()
	m, err := New(Options{Runtime: e.rt, Store: e.st, Templates: e.tpl, DataDir: e.dataDir,
		Resources: runtime.Resources{MemoryBytes: 256 << 20, CPUs: 1, Pids: 256}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close()
		all, _ := e.st.AllSandboxes(context.Background())
		for _, s := range all {
			m.remove(context.Background(), s.ID)
		}
	})
	return m
}

// run runs a shell command through the sandbox's envd and returns stdout.
func run(t *testing.T, sock, token, script string) (string, error) {
	t.Helper()
	c := processconnect.NewProcessClient(SocketClient(sock), "http://envd", connect.WithProtoJSON())
	req := connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", script}}})
	if token != "" {
		req.Header().Set("X-Access-Token", token)
	}
	stream, err := c.Start(context.Background(), req)
	if err != nil {
		return "", err
	}
	var out strings.Builder
	for stream.Receive() {
		out.Write(stream.Msg().GetEvent().GetData().GetStdout())
	}
	return out.String(), stream.Err()
}

func TestCreateSecureWithEnvs(t *testing.T) {
	e := newEnv(t)
	m := e.manager(t)
	ctx := context.Background()
	rec, err := m.Create(ctx, CreateRequest{Secure: true, EnvVars: map[string]string{"FOO": "bar"}, Metadata: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	if rec.EnvdAccessToken == "" || rec.TemplateID != "base" || rec.ClientID == "" || rec.EnvdVersion == "" {
		t.Errorf("record = %+v", rec)
	}
	if !strings.HasPrefix(rec.ID, "i") || len(rec.ID) != 21 {
		t.Errorf("id %q is not in E2B's shape", rec.ID)
	}
	sock, err := m.Socket(ctx, "", rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	// envd answers at once, wants the token, and has the sandbox's envs.
	if _, err := run(t, sock, "", "true"); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("a command without the token: %v, want unauthenticated", err)
	}
	out, err := run(t, sock, rec.EnvdAccessToken, `echo "$FOO $(id -un)"`)
	if err != nil || out != "bar user\n" {
		t.Errorf("with the token: %q, %v; want the sandbox env and the template's user", out, err)
	}
	got, err := m.Get(ctx, "", rec.ID)
	if err != nil || got.Metadata["k"] != "v" {
		t.Errorf("Get = %+v, %v", got, err)
	}
}

func TestKillAndKeyScoping(t *testing.T) {
	e := newEnv(t)
	m := e.manager(t)
	ctx := context.Background()
	_, keyA, _ := e.st.CreateKey(ctx, "a")
	_, keyB, _ := e.st.CreateKey(ctx, "b")
	rec, err := m.Create(ctx, CreateRequest{KeyID: keyA.ID})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get(ctx, keyB.ID, rec.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another key's Get = %v, want not found", err)
	}
	if err := m.Kill(ctx, keyB.ID, rec.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another key's Kill = %v, want not found", err)
	}
	sock, _ := m.Socket(ctx, keyA.ID, rec.ID)
	if err := m.Kill(ctx, keyA.ID, rec.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get(ctx, keyA.ID, rec.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get after Kill = %v, want not found", err)
	}
	if _, err := e.rt.Load(ctx, rec.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the runtime still has the sandbox: %v", err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket %s left behind", sock)
	}
	if err := m.Kill(ctx, keyA.ID, rec.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("second Kill = %v, want not found", err)
	}
}

func TestTimeoutExpiresAndConnectOnlyExtends(t *testing.T) {
	e := newEnv(t)
	m := e.manager(t)
	ctx := context.Background()
	rec, err := m.Create(ctx, CreateRequest{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	end := rec.EndAt
	got, err := m.Connect(ctx, "", rec.ID, 10*time.Second)
	if err != nil || !got.EndAt.Equal(end) {
		t.Errorf("Connect with a shorter timeout moved the end from %v to %v (%v)", end, got.EndAt, err)
	}
	got, err = m.Connect(ctx, "", rec.ID, 10*time.Minute)
	if err != nil || !got.EndAt.After(end) {
		t.Errorf("Connect with a longer timeout: end %v, was %v (%v)", got.EndAt, end, err)
	}
	// setTimeout may shorten: the sandbox then expires and is gone.
	if err := m.SetTimeout(ctx, "", rec.ID, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err := m.Get(ctx, "", rec.ID); errors.Is(err, errdefs.ErrNotFound) {
			if _, err := e.rt.Load(ctx, rec.ID); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("expired sandbox still in the runtime: %v", err)
			}
			return
		}
	}
	t.Error("the sandbox outlived its timeout")
}

func TestRecoverAfterRestart(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	first := e.manager(t)
	alive, err := first.Create(ctx, CreateRequest{Secure: true})
	if err != nil {
		t.Fatal(err)
	}
	dead, err := first.Create(ctx, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first.Close() // the server goes away; sandboxes keep running
	// One sandbox dies while no server runs.
	sbx, _ := e.rt.Load(ctx, dead.ID)
	if err := sbx.Delete(ctx); err != nil {
		t.Fatal(err)
	}

	second := e.manager(t)
	if err := second.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := second.Get(ctx, "", alive.ID)
	if err != nil || got.EnvdAccessToken != alive.EnvdAccessToken || !got.EndAt.Equal(alive.EndAt) {
		t.Fatalf("adopted sandbox = %+v, %v; want the same token and end", got, err)
	}
	sock, _ := second.Socket(ctx, "", alive.ID)
	if out, err := run(t, sock, got.EnvdAccessToken, "echo still-here"); err != nil || out != "still-here\n" {
		t.Errorf("adopted sandbox's envd: %q, %v", out, err)
	}
	if _, err := second.Get(ctx, "", dead.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a sandbox that died meanwhile is reported as %v, want gone", err)
	}
	resp, err := SocketClient(sock).Get("http://envd/health")
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Errorf("health of the adopted sandbox: %v %v", resp, err)
	}
}

func TestCreateRefusesBadInput(t *testing.T) {
	e := newEnv(t)
	m := e.manager(t)
	ctx := context.Background()
	if _, err := m.Create(ctx, CreateRequest{Template: "no-such-template"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("unknown template: %v, want not found", err)
	}
	if _, err := m.Create(ctx, CreateRequest{Timeout: -time.Second}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("negative timeout: %v, want invalid argument", err)
	}
	if all, _ := e.st.AllSandboxes(ctx); len(all) != 0 {
		t.Errorf("refused creates left %d records", len(all))
	}
	if ents, _ := os.ReadDir(filepath.Join(e.dataDir, "sockets")); len(ents) != 0 {
		t.Errorf("refused creates left sockets: %v", ents)
	}
}
