package netpolicy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// caPort is where the internet serves HTTPS with a certificate of the
// test's own CA (the TLS-inspecting proxy of a real network).
const caPort = 8443

// TestCABundle: with hutch serve --ca-bundle naming a CA the test made,
// curl, git, Python and Node.js in sandboxes trust a server whose
// certificate that CA signed, as the default user and as root, also after
// the sandbox rebuilt its trust store (update-ca-certificates); without
// the flag, the same sandboxes refuse it (curl's exit 60).
func TestCABundle(t *testing.T) {
	caPEM, serverCert := testCA(t)
	bundle := filepath.Join(t.TempDir(), "proxy-ca.pem")
	if err := os.WriteFile(bundle, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		args    []string
		trusted bool
	}{
		// Warm pools: the bundle comes with the /init of a sandbox handed
		// out, not with its start.
		{"with the CA", []string{"--ca-bundle", bundle, "--warm", "2"}, true},
		// Explicitly none, whatever HUTCH_CA_BUNDLE the machine sets.
		{"without", []string{"--ca-bundle", ""}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, tc.args...)
			if err := hutchtest.NetNSOf(w.internet).Do(func() error {
				ln, err := net.Listen("tcp", fmt.Sprintf("%s:%d", webAddr, caPort))
				if err != nil {
					return err
				}
				// Refused handshakes are what half of this test is
				// about: not logged.
				srv := &http.Server{Handler: echoHandler(w.streams), ReadHeaderTimeout: 10 * time.Second,
					TLSConfig: &tls.Config{Certificates: []tls.Certificate{serverCert}}, ErrorLog: log.New(io.Discard, "", 0)}
				w.closers = append(w.closers, srv)
				go srv.ServeTLS(ln, "", "")
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			url := fmt.Sprintf("https://allowed.test:%d/", caPort)
			want := "served-by " + webAddr
			for _, user := range []string{"", "root"} {
				id := w.create(t, nil)
				checkTrust(t, w, id, user, url, want, tc.trusted)
			}
			if !tc.trusted {
				return
			}
			// apt-get install ca-certificates, or a user adding a CA of
			// their own, rebuilds the bundle by renaming a new one over it.
			id := w.create(t, nil)
			if r := w.runAs(t, id, "root", "update-ca-certificates"); r.ExitCode != 0 {
				t.Fatalf("update-ca-certificates: exit %d\n%s%s", r.ExitCode, r.Stdout, r.Stderr)
			}
			checkTrust(t, w, id, "", url, want, true)
		})
	}
}

// checkTrust runs a client of each kind against url in sandbox id as user
// ("" for the default one): each must reach it when trusted, and each
// must refuse its certificate otherwise.
func checkTrust(t *testing.T, w *world, id, user, url, want string, trusted bool) {
	t.Helper()
	clients := []struct {
		name string
		cmd  string
		// refused is what the client says of a certificate it does not
		// trust.
		refused string
	}{
		{"curl", fmt.Sprintf("curl -sS %s; echo exit=$?", url), "exit=60"},
		{"python", fmt.Sprintf(`python3 -c 'import urllib.request; print(urllib.request.urlopen("%s", timeout=20).read().decode())'`, url), "CERTIFICATE_VERIFY_FAILED"},
		{"node", fmt.Sprintf(`node -e 'require("https").get("%s", r => r.pipe(process.stdout)).on("error", e => { console.error(e.code); process.exit(3) })'`, url), "UNABLE_TO_VERIFY_LEAF_SIGNATURE"},
		// Debian's git goes through GnuTLS, which reads the same bundle.
		// The server speaks no git: trusted, git fails later.
		{"git", fmt.Sprintf("git ls-remote %srepo.git 2>&1; true", url), "server certificate verification failed"},
	}
	for _, c := range clients {
		r := w.runAs(t, id, user, c.cmd)
		out := r.Stdout + r.Stderr
		switch {
		case trusted && strings.Contains(out, c.refused):
			t.Errorf("%s as %q does not trust the CA it was given:\n%s", c.name, user, out)
		case trusted && c.name != "git" && !strings.Contains(out, want):
			t.Errorf("%s as %q did not reach the server (want %q):\n%s", c.name, user, want, out)
		case !trusted && !strings.Contains(out, c.refused):
			t.Errorf("%s as %q without the CA: want %q (a refused certificate):\n%s", c.name, user, c.refused, out)
		}
	}
}

// testCA makes a CA and a server certificate it signed for the test
// names and addresses; it returns the CA's certificate in PEM.
func testCA(t *testing.T) ([]byte, tls.Certificate) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "netpolicy test proxy CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTpl, caTpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "allowed.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: certNames, IPAddresses: []net.IP{net.ParseIP(webAddr)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestCABundleRefused: hutch serve refuses at start, saying why, a
// --ca-bundle that is not PEM certificates, before it touches anything.
func TestCABundleRefused(t *testing.T) {
	bin := hutchBin.Path(t)
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caPEM, _ := testCA(t)
	tests := []struct {
		name, file, want string
	}{
		{"not PEM", write("notes.txt", "just some text\n"), "no PEM certificate"},
		{"a private key", write("key.pem", string(caPEM)+"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), "block 2 of the CA bundle is a PRIVATE KEY"},
		{"a broken certificate", write("broken.pem", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), "certificate 1: x509:"},
		{"missing", filepath.Join(dir, "missing.pem"), "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := filepath.Join(dir, "data-"+strings.ReplaceAll(tc.name, " ", "-"))
			cmd := exec.Command(bin, "serve", "--ca-bundle", tc.file, "--network=false", "--listen", "127.0.0.1:0")
			cmd.Env = append(os.Environ(), "HUTCH_DATA_DIR="+data)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("hutch serve --ca-bundle %s started:\n%s", tc.file, out)
			}
			if !strings.Contains(string(out), "--ca-bundle: ") || !strings.Contains(string(out), tc.want) {
				t.Errorf("hutch serve --ca-bundle %s: %s\nwant an error about --ca-bundle saying %q", tc.file, out, tc.want)
			}
			if _, err := os.Stat(data); err == nil {
				t.Errorf("hutch serve made its data dir before it refused the bundle")
			}
		})
	}
}
