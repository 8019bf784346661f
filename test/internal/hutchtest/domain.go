package hutchtest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// DomainTestDomain is the domain StartDomainServe's servers are reached
// by: names under .localhost resolve to the loopback addresses
// (libnss-myhostname, which scripts/setup.sh installs).
const DomainTestDomain = "hutch.localhost"

// StartDomainServe starts `hutch serve` as a remote user reaches it: in a
// network namespace of its own, on port 443 of every address, serving
// TLS with --domain domain and --tls-self-signed, so that SDKs find it by
// E2B_DOMAIN alone (DomainEnv) — the only way older SDKs can. Clients run
// inside the namespace (NetnsCommand); the server's Client dials into it.
// args come after those flags (networking is off).
func StartDomainServe(t *testing.T, bin, domain string, args ...string) *Server {
	t.Helper()
	tmp := t.TempDir()
	os.Chmod(filepath.Dir(tmp), 0o711)
	os.Chmod(tmp, 0o711)
	s := NewServer(t, bin, filepath.Join(tmp, "data"))
	s.NS = NewNetNS(t)
	s.Domain = domain
	s.Addr = "127.0.0.1:443"
	s.Listen = ":443" // IPv6 too: ::1 is what .localhost names resolve to first
	s.Wrap = s.NS.Wrap()
	s.Args = append([]string{"--domain", domain, "--tls-self-signed", "--network=false"}, args...)
	s.Client = &http.Client{Timeout: 30 * time.Second, Transport: &caTransport{s: s}}
	s.Start()
	return s
}

// CAFile is the local CA of a server started with --tls-self-signed.
func (s *Server) CAFile() string { return filepath.Join(s.DataDir, "tls", "ca.pem") }

// DomainEnv points an E2B SDK at a server started by StartDomainServe the
// way a remote user does: E2B_DOMAIN, the key, and the server's CA trusted
// by Python (SSL_CERT_FILE) and Node.js (NODE_EXTRA_CA_CERTS).
func (s *Server) DomainEnv() []string {
	return []string{"E2B_DOMAIN=" + s.Domain, "E2B_API_KEY=" + TestKey,
		"SSL_CERT_FILE=" + s.CAFile(), "NODE_EXTRA_CA_CERTS=" + s.CAFile()}
}

// NetnsCommand is exec.Command of name and args, run in the server's
// network namespace (StartDomainServe), or as is when it has none.
func (s *Server) NetnsCommand(name string, args ...string) *exec.Cmd {
	if s.NS == nil {
		return exec.Command(name, args...)
	}
	return s.NS.Command(name, args...)
}

// caTransport reaches a domain server in its namespace, trusting its CA
// only: the CA is the server's to make at its first start, so the
// transport is made once the file exists.
type caTransport struct {
	s  *Server
	mu sync.Mutex
	rt *http.Transport
}

func (c *caTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	if c.rt == nil {
		pem, err := os.ReadFile(c.s.CAFile())
		if err != nil {
			c.mu.Unlock()
			return nil, fmt.Errorf("the server's CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			c.mu.Unlock()
			return nil, fmt.Errorf("the server's CA %s holds no certificate", c.s.CAFile())
		}
		ns := c.s.NS
		c.rt = &http.Transport{
			// Every name is the server's: dial its address in its
			// namespace (Go's own resolver does not know .localhost).
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return ns.DialContext(ctx, network, c.s.Addr)
			},
			TLSClientConfig:   &tls.Config{RootCAs: pool},
			ForceAttemptHTTP2: true,
		}
	}
	rt := c.rt
	c.mu.Unlock()
	return rt.RoundTrip(r)
}
