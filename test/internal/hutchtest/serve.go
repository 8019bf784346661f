package hutchtest

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testenv"
)

// TestKey is the API key every test server accepts (HUTCH_API_KEY).
const TestKey = "e2b_0123456789012345678901234567890123456789"

// TestDomain is the test servers' sandbox domain: hosts
// "<port>-<id>.hutch.test" are routed to sandboxes.
const TestDomain = "hutch.test"

// Server is a real `hutch serve` run from the binary built from this
// checkout; it can be stopped and started again on the same data dir and
// address. StartServe makes and starts one as most tests want it;
// NewServer makes one whose fields the caller sets before Start.
type Server struct {
	// Addr is host:port of the listener, as clients reach it.
	Addr string
	// Bin is the hutch binary.
	Bin string
	// Env is the server's environment (HUTCH_DATA_DIR, HUTCH_TEMPLATES,
	// HUTCH_API_KEY); hutch commands run with it see the same state.
	Env []string
	// DataDir is the server's data directory.
	DataDir string
	// Args are hutch serve's flags after --listen.
	Args []string
	// Listen is hutch serve's --listen; Addr when empty.
	Listen string
	// Wrap, when not empty, is the command hutch serve runs under, up to
	// where serve's own argv starts: nsenter into a network namespace,
	// prlimit.
	Wrap []string
	// Client reaches the server (its transport may dial from another
	// network namespace); http.DefaultClient when nil.
	Client *http.Client
	// Log receives the server's output; when nil each line is logged to
	// the test, after LogPrefix ("serve: " when empty).
	Log       io.Writer
	LogPrefix string
	// NS is the network namespace the server runs in, when not the
	// test's (StartDomainServe).
	NS *NetNS
	// Domain, when set, is the server's --domain, served over TLS: URL is
	// https://api.<Domain> (StartDomainServe).
	Domain string

	t *testing.T

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
	s := NewServer(t, bin, data)
	s.Args = append([]string{"--domain", TestDomain, "--network=false"}, args...)
	s.Start()
	return s
}

// NewServer is a Server, not started, of bin on data dir data (which
// need not exist), at a free loopback port, with the machine's templates
// and TestKey. When the test ends it is stopped and every sandbox of its
// data dir removed (sandboxes outlive servers by design). It needs root
// (testenv.RequireRoot).
func NewServer(t *testing.T, bin, data string) *Server {
	t.Helper()
	testenv.RequireRoot(t, "hutch serve runs sandboxes: namespaces, cgroups and mounts")
	s := &Server{
		t: t, Bin: bin, Addr: FreeAddr(t), DataDir: data,
		Env: append(os.Environ(), "HUTCH_DATA_DIR="+data, "HUTCH_TEMPLATES="+testenv.TemplatesDir(), "HUTCH_API_KEY="+TestKey),
	}
	t.Cleanup(func() {
		s.killPaused()
		s.Stop(syscall.SIGTERM)
		s.RemoveSandboxes()
		unmountUnder(data)
	})
	return s
}

// URL is the server's base URL.
func (s *Server) URL() string {
	if s.Domain != "" {
		return "https://api." + s.Domain
	}
	return "http://" + s.Addr
}

func (s *Server) client() *http.Client {
	if s.Client != nil {
		return s.Client
	}
	return http.DefaultClient
}

// Start runs the server and waits until it answers; it fails the test if
// the server exits first or does not answer within a minute.
func (s *Server) Start() {
	s.t.Helper()
	s.Launch()
	s.WaitReady(time.Minute)
}

// Launch runs the server without waiting for it to answer (WaitReady):
// for servers that wait for each other, as a cluster's nodes do.
func (s *Server) Launch() {
	s.t.Helper()
	listen := s.Listen
	if listen == "" {
		listen = s.Addr
	}
	argv := append(append(append([]string{}, s.Wrap...), s.Bin, "serve", "--listen", listen), s.Args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = s.Env
	out, closeOut := s.Log, func() {}
	if out == nil {
		prefix := s.LogPrefix
		if prefix == "" {
			prefix = "serve: "
		}
		log := LogWriter(s.t, prefix)
		out, closeOut = log, func() { log.Close() }
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); closeOut(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
}

// WaitReady waits up to d for the launched server to answer /health; it
// fails the test if the server exits first or does not answer in time.
func (s *Server) WaitReady(d time.Duration) {
	s.t.Helper()
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		s.t.Fatal("WaitReady: the server was not launched")
	}
	for deadline := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		resp, err := s.client().Get(s.URL() + "/health")
		if err == nil {
			resp.Body.Close()
			return
		}
		select {
		case <-done:
			s.t.Fatalf("hutch serve exited before it answered: %s", cmd.ProcessState)
		default:
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

// Stop sends sig to the server and waits for it to exit, killing it if it
// has not within 20 seconds.
func (s *Server) Stop(sig syscall.Signal) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		s.t.Logf("hutch serve did not exit within 20s of %v; killing it", sig)
		cmd.Process.Kill()
		<-done
	}
}

// RemoveSandboxes removes every sandbox of the server's data dir with
// `hutch rm` (what a test left behind), logging a failure.
func (s *Server) RemoveSandboxes() {
	ps := exec.Command(s.Bin, "ps", "-q")
	ps.Env = s.Env
	out, _ := ps.Output()
	ids := strings.Fields(string(out))
	if len(ids) == 0 {
		return
	}
	rm := exec.Command(s.Bin, append([]string{"rm"}, ids...)...)
	rm.Env = s.Env
	if out, err := rm.CombinedOutput(); err != nil {
		s.t.Logf("hutch rm %v: %v\n%s", ids, err, out)
	}
}

// unmountUnder unmounts what is mounted below dir (the volumes a test
// left), so that the data dir can be removed without reaching into them.
func unmountUnder(dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	prefix := filepath.Clean(dir) + "/"
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], prefix) {
			syscall.Unmount(f[4], 2 /* MNT_DETACH */)
		}
	}
}

// killPaused kills, through the API of the server if it runs, the
// sandboxes paused with their files: they have no runtime sandbox for
// RemoveSandboxes to find, and their files are in the template store the
// tests share, which must not keep them.
func (s *Server) killPaused() {
	s.mu.Lock()
	running := s.cmd != nil
	s.mu.Unlock()
	if !running {
		return
	}
	c := &http.Client{Timeout: 30 * time.Second, Transport: s.client().Transport}
	req, _ := http.NewRequest("GET", s.URL()+"/v2/sandboxes?state=paused&limit=100", nil)
	req.Header.Set("X-API-KEY", TestKey)
	resp, err := c.Do(req)
	if err != nil {
		return
	}
	var list []struct {
		SandboxID string `json:"sandboxID"`
	}
	json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	for _, sb := range list {
		req, _ := http.NewRequest("DELETE", s.URL()+"/sandboxes/"+sb.SandboxID, nil)
		req.Header.Set("X-API-KEY", TestKey)
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
		}
	}
}

// SDKEnv is what points an E2B SDK (or Hutch's) at the server.
func (s *Server) SDKEnv() []string {
	// E2B_VOLUME_API_URL: the volume content API is served on the same
	// listener; without it the SDK would go to https://api.<E2B_DOMAIN>.
	return []string{"E2B_API_URL=" + s.URL(), "E2B_SANDBOX_URL=" + s.URL(), "E2B_VOLUME_API_URL=" + s.URL(), "E2B_API_KEY=" + TestKey}
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
	resp, err := s.client().Do(req)
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
func LogWriter(t testing.TB, prefix string) io.WriteCloser {
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
