package hutchtest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// EtcdBinary is the etcd of Debian's etcd-server package (3.4), which
// scripts/setup.sh installs: the external etcd of the cluster tests.
const EtcdBinary = "/usr/bin/etcd"

// RequireEtcd skips the test when EtcdBinary is missing, saying how to
// get it.
func RequireEtcd(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(EtcdBinary); err != nil {
		t.Skipf("an external etcd needs Debian's etcd-server (%v): ./scripts/setup.sh installs it", err)
	}
}

// EtcdTLS are the files an external etcd serves TLS with, to its clients
// and its peers alike, asking each for a certificate of CA.
type EtcdTLS struct {
	CA, Cert, Key string
}

// Etcd is an external etcd (EtcdBinary), one member on each of some hosts
// of a LAN, listening on port 2379 (clients) and 2380 (peers) of the
// host's address. StartEtcdExternal starts one; its members are killed
// when the test ends.
type Etcd struct {
	// Members are the members, one per host, in the order given.
	Members []*EtcdMember
	// TLS, when not nil, is what the members serve TLS with (https URLs).
	TLS *EtcdTLS
}

// EtcdMember is one member of an Etcd.
type EtcdMember struct {
	// Name is the member's name, "etcd<host index>".
	Name string
	// Host is where it runs.
	Host *Host
	// ClientURL and PeerURL are where clients and peers reach it.
	ClientURL, PeerURL string
	// Dir is its data dir.
	Dir string

	t       testing.TB
	e       *Etcd
	cluster string // --initial-cluster

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// StartEtcdExternal starts an external etcd of one member on each host
// given, over plain HTTP, and waits until every member says it is
// healthy. It skips the test when etcd is not installed (RequireEtcd).
func StartEtcdExternal(t testing.TB, hosts ...*Host) *Etcd {
	t.Helper()
	return StartEtcdExternalTLS(t, nil, hosts...)
}

// StartEtcdExternalTLS is StartEtcdExternal serving TLS with c (clients
// and peers must show a certificate of c.CA), or plain HTTP when c is
// nil.
func StartEtcdExternalTLS(t testing.TB, c *EtcdTLS, hosts ...*Host) *Etcd {
	t.Helper()
	RequireEtcd(t)
	if len(hosts) == 0 {
		t.Fatal("StartEtcdExternal: no host")
	}
	scheme := "http"
	if c != nil {
		scheme = "https"
	}
	e := &Etcd{TLS: c}
	var initial []string
	for _, h := range hosts {
		m := &EtcdMember{
			Name: fmt.Sprintf("etcd%d", h.Index), Host: h, t: t, e: e,
			ClientURL: scheme + "://" + h.Addr(2379),
			PeerURL:   scheme + "://" + h.Addr(2380),
			Dir:       filepath.Join(t.TempDir(), "etcd"),
		}
		initial = append(initial, m.Name+"="+m.PeerURL)
		e.Members = append(e.Members, m)
	}
	for _, m := range e.Members {
		m.cluster = strings.Join(initial, ",")
		t.Cleanup(func() { m.Stop(syscall.SIGKILL) })
	}
	// Together: a member waits for a quorum of its peers before it is
	// healthy.
	for _, m := range e.Members {
		m.Launch()
	}
	for _, m := range e.Members {
		m.WaitHealthy(time.Minute)
	}
	return e
}

// Endpoints are the members' client URLs.
func (e *Etcd) Endpoints() []string {
	var urls []string
	for _, m := range e.Members {
		urls = append(urls, m.ClientURL)
	}
	return urls
}

// Launch starts the member's process (its data dir kept from a previous
// run, if any), without waiting for it.
func (m *EtcdMember) Launch() {
	m.t.Helper()
	args := []string{
		"--name", m.Name, "--data-dir", m.Dir,
		"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
		"--listen-peer-urls", m.PeerURL, "--initial-advertise-peer-urls", m.PeerURL,
		"--initial-cluster", m.cluster, "--initial-cluster-state", "new",
		"--initial-cluster-token", "hutch-test",
		"--logger", "zap", "--log-outputs", "stderr", "--log-level", "error",
	}
	if c := m.e.TLS; c != nil {
		args = append(args,
			"--trusted-ca-file", c.CA, "--cert-file", c.Cert, "--key-file", c.Key, "--client-cert-auth",
			"--peer-trusted-ca-file", c.CA, "--peer-cert-file", c.Cert, "--peer-key-file", c.Key, "--peer-client-cert-auth")
	}
	cmd := m.Host.Command(EtcdBinary, args...)
	log := LogWriter(m.t, m.Name+": ")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		m.t.Fatalf("start %s: %v", m.Name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); log.Close(); close(done) }()
	m.mu.Lock()
	m.cmd, m.done = cmd, done
	m.mu.Unlock()
}

// WaitHealthy waits up to d for the member to say it is healthy (its
// /health, which needs a leader), and fails the test if it does not or
// exits first.
func (m *EtcdMember) WaitHealthy(d time.Duration) {
	m.t.Helper()
	m.mu.Lock()
	done := m.done
	m.mu.Unlock()
	var err error
	for deadline := time.Now().Add(d); ; time.Sleep(100 * time.Millisecond) {
		if err = m.Healthy(context.Background()); err == nil {
			return
		}
		select {
		case <-done:
			m.t.Fatalf("%s exited before it was healthy: %v", m.Name, err)
		default:
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("%s not healthy within %v: %v", m.Name, d, err)
		}
	}
}

// Healthy asks the member's /health, from its own host, and returns nil
// when it answers {"health":"true"}.
func (m *EtcdMember) Healthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", m.ClientURL+"/health", nil)
	if err != nil {
		return err
	}
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return m.Host.DialContext(ctx, network, addr)
	}}
	defer tr.CloseIdleConnections()
	if m.e.TLS != nil {
		cfg, err := m.e.TLS.ClientConfig()
		if err != nil {
			return err
		}
		tr.TLSClientConfig = cfg
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var h struct{ Health string }
	if err := json.Unmarshal(b, &h); err != nil || h.Health != "true" {
		return fmt.Errorf("/health: %s %s", resp.Status, b)
	}
	return nil
}

// ClientConfig is a TLS client configuration that trusts c.CA and shows
// c.Cert.
func (c *EtcdTLS) ClientConfig() (*tls.Config, error) {
	pem, err := os.ReadFile(c.CA)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no certificate", c.CA)
	}
	cert, err := tls.LoadX509KeyPair(c.Cert, c.Key)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}, nil
}

// Stop sends sig to the member and waits for it to exit (killing it after
// 20 seconds); its data dir stays for Launch.
func (m *EtcdMember) Stop(sig syscall.Signal) {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.cmd = nil
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		m.t.Logf("%s did not exit within 20s of %v; killing it", m.Name, sig)
		cmd.Process.Kill()
		<-done
	}
}

// Kill kills the member with SIGKILL, as a crash would.
func (m *EtcdMember) Kill() { m.Stop(syscall.SIGKILL) }
