package hutchtest

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestKey is the API key every test server accepts (HUTCH_API_KEY).
const TestKey = "e2b_0123456789012345678901234567890123456789"

// TestDomain is the test servers' sandbox domain: hosts
// "<port>-<id>.hutch.test" are routed to sandboxes.
const TestDomain = "hutch.test"

// Server is a real `hutch serve` on a loopback port, run from the binary
// built from this checkout; it can be killed and started again on the same
// data dir and address.
type Server struct {
	// Addr is host:port of the listener.
	Addr string
	// Bin is the hutch binary.
	Bin string
	// Env is the server's environment (HUTCH_DATA_DIR, HUTCH_TEMPLATES,
	// HUTCH_API_KEY); hutch commands run with it see the same state.
	Env []string
	// DataDir is the server's data directory.
	DataDir string

	t    *testing.T
	args []string // extra flags of hutch serve

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// StartServe starts `hutch serve` from bin with a fresh data dir and the
// flags given (networking off: network tests make namespaces of their
// own); everything it made is removed when the test ends (sandboxes
// outlive servers by design).
func StartServe(t *testing.T, bin string, args ...string) *Server {
	t.Helper()
	tmp := t.TempDir()
	// Sandboxes' uids must traverse to their layers under the data dir:
	// hutch serve opens the data dir itself, never the ones above it.
	os.Chmod(filepath.Dir(tmp), 0o711)
	os.Chmod(tmp, 0o711)
	return StartServeIn(t, bin, filepath.Join(tmp, "data"), args...)
}

// StartServeIn is StartServe on the data dir given, which need not exist;
// the directory and those above it are the caller's (their modes are left
// as they are), the sandboxes the server made are removed when the test
// ends.
func StartServeIn(t *testing.T, bin, data string, args ...string) *Server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	templates := os.Getenv("HUTCH_TEMPLATES")
	if templates == "" {
		templates = "/var/lib/hutch/templates"
	}
	s := &Server{
		t: t, Bin: bin, Addr: addr, DataDir: data, args: append([]string{"--network=false"}, args...),
		Env: append(os.Environ(), "HUTCH_DATA_DIR="+data, "HUTCH_TEMPLATES="+templates, "HUTCH_API_KEY="+TestKey),
	}
	t.Cleanup(func() {
		s.Stop(syscall.SIGTERM)
		for _, st := range s.RuntimeSandboxes() {
			rm := exec.Command(s.Bin, "rm", st.ID)
			rm.Env = s.Env
			rm.Run()
		}
	})
	s.Start()
	return s
}

// URL is the server's base URL.
func (s *Server) URL() string { return "http://" + s.Addr }

// Start runs the server and waits until it answers.
func (s *Server) Start() {
	s.t.Helper()
	cmd := exec.Command(s.Bin, append([]string{"serve", "--listen", s.Addr, "--domain", TestDomain}, s.args...)...)
	cmd.Env = s.Env
	log := LogWriter(s.t, "serve: ")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); log.Close(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get(s.URL() + "/health")
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("hutch serve never answered: %v", err)
		}
	}
}

// Pid is the server's process id, 0 when it is stopped.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Stop sends sig to the server and waits for it to exit.
func (s *Server) Stop(sig syscall.Signal) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(sig)
	<-done
}

// SDKEnv is what points an E2B SDK (or Hutch's) at the server.
func (s *Server) SDKEnv() []string {
	return []string{"E2B_API_URL=" + s.URL(), "E2B_SANDBOX_URL=" + s.URL(), "E2B_API_KEY=" + TestKey}
}

// RuntimeSandboxes lists the runtime's sandboxes in the server's data dir.
func (s *Server) RuntimeSandboxes() []RuntimeStatus {
	return RuntimeSandboxes(s.t, s.Bin, s.Env)
}

// APISandboxes lists the ids of the sandboxes the API reports (every
// state).
func (s *Server) APISandboxes() []string {
	req, _ := http.NewRequest("GET", s.URL()+"/v2/sandboxes?limit=100", nil)
	req.Header.Set("X-API-KEY", TestKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var list []struct {
		SandboxID string `json:"sandboxID"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		s.t.Fatalf("list sandboxes: %s: %v", resp.Status, err)
	}
	var ids []string
	for _, sb := range list {
		ids = append(ids, sb.SandboxID)
	}
	return ids
}

// LogWriter returns a writer that logs each complete line to t; Close it
// to flush the last one.
func LogWriter(t *testing.T, prefix string) io.WriteCloser {
	r, w := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			t.Log(prefix + sc.Text())
		}
		io.Copy(io.Discard, r)
	}()
	return &lineLog{w: w, done: done}
}

type lineLog struct {
	w    *io.PipeWriter
	done chan struct{}
}

func (l *lineLog) Write(p []byte) (int, error) { return l.w.Write(p) }

func (l *lineLog) Close() error {
	l.w.Close()
	<-l.done
	return nil
}
