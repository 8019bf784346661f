package tlscert

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLocalCAIsMadeOnceAndKept(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	now := time.Now()
	ca, err := OpenLocal(dir, "", now)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("CA key mode %v, want 0600", st.Mode().Perm())
	}
	first, _ := os.ReadFile(ca.CertFile)
	again, err := OpenLocal(dir, "", now)
	if err != nil {
		t.Fatal(err)
	}
	second, _ := os.ReadFile(again.CertFile)
	if string(first) != string(second) {
		t.Error("a second start made a new CA: clients that trust the first would stop")
	}
}

func TestLocalCARefusesWhatClientsCannotTrust(t *testing.T) {
	for _, tc := range []struct {
		name    string
		damage  func(dir string)
		wantErr string
	}{
		{"key readable by others", func(dir string) { os.Chmod(filepath.Join(dir, CAKeyFile), 0o644) }, "others may read it"},
		{"key gone", func(dir string) { os.Remove(filepath.Join(dir, CAKeyFile)) }, "no such file"},
		{"certificate gone", func(dir string) { os.Remove(filepath.Join(dir, CAFile)) }, "no such file"},
		{"certificate garbage", func(dir string) { os.WriteFile(filepath.Join(dir, CAFile), []byte("nope"), 0o644) }, "local CA"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := OpenLocal(dir, "", time.Now()); err != nil {
				t.Fatal(err)
			}
			tc.damage(dir)
			_, err := OpenLocal(dir, "", time.Now())
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("OpenLocal after %s: %v, want an error saying %q", tc.name, err, tc.wantErr)
			}
		})
	}
}

func TestIssuedCertificateCoversTheDomain(t *testing.T) {
	now := time.Now()
	ca, err := OpenLocal(t.TempDir(), "hutch.example", now)
	if err != nil {
		t.Fatal(err)
	}
	names, ips := ServeNames("hutch.example")
	c, err := ca.Issue(names, ips, now)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	for _, tc := range []struct {
		host string
		ok   bool
	}{
		{"api.hutch.example", true},
		{"49983-i1x2y3z4.hutch.example", true},
		{"hutch.example", true},
		{"localhost", true},
		{"127.0.0.1", true},
		{"a.b.hutch.example", false},
		{"api.other.example", false},
	} {
		_, err := c.Leaf.Verify(x509.VerifyOptions{DNSName: tc.host, Roots: pool, CurrentTime: now})
		if (err == nil) != tc.ok {
			t.Errorf("verify for %s: %v, want ok=%v", tc.host, err, tc.ok)
		}
	}
	if len(c.Certificate) != 2 {
		t.Errorf("chain of %d certificates, want the leaf and the CA", len(c.Certificate))
	}
}

// pair writes a certificate for names, valid from notBefore to notAfter,
// and its key into dir, returning the paths.
func pair(t *testing.T, dir, prefix string, names []string, notBefore time.Time) (string, string) {
	t.Helper()
	ca, err := OpenLocal(filepath.Join(dir, prefix+"-ca"), "", notBefore)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ca.Issue(names, nil, notBefore.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath := filepath.Join(dir, prefix+".pem"), filepath.Join(dir, prefix+"-key.pem")
	if err := writeFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certPath, keyPath
}

func TestLoadFilesRefusesBadPairs(t *testing.T) {
	dir := t.TempDir()
	goodCert, goodKey := pair(t, dir, "good", []string{"*.d.test"}, time.Now())
	_, otherKey := pair(t, dir, "other", []string{"*.d.test"}, time.Now())
	oldCert, oldKey := pair(t, dir, "old", []string{"*.d.test"}, time.Now().Add(-2*serveLifetime))
	forDomain := func(leaf *x509.Certificate) error { return CheckNames(leaf, "api.e.test", "49983-x.e.test") }
	for _, tc := range []struct {
		name, cert, key string
		check           func(*x509.Certificate) error
		wantErr         string
	}{
		{"expired", oldCert, oldKey, nil, "expired on"},
		{"key of another certificate", goodCert, otherKey, nil, "private key does not match"},
		{"missing file", filepath.Join(dir, "nope.pem"), goodKey, nil, "no such file"},
		{"key as certificate", goodKey, goodKey, nil, "failed to find"},
		{"another domain", goodCert, goodKey, forDomain, "not api.e.test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadFiles(t.Context(), tc.cert, tc.key, tc.check, slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("LoadFiles: %v, want an error saying %q", err, tc.wantErr)
			}
		})
	}
}

func TestLoadFilesReloadsWhenTheFilesChange(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath := pair(t, dir, "serve", []string{"*.one.test"}, time.Now())
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	f, err := LoadFiles(ctx, certPath, keyPath, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckNames(f.Leaf(), "api.one.test"); err != nil {
		t.Fatal(err)
	}
	// A broken write is not served: the previous certificate stays.
	os.WriteFile(certPath, []byte("half a file"), 0o644)
	time.Sleep(time.Second)
	if err := CheckNames(f.Leaf(), "api.one.test"); err != nil {
		t.Fatalf("after a broken write: %v", err)
	}
	// A renewal as certbot does it: new files renamed over the old.
	newCert, newKey := pair(t, dir, "next", []string{"*.two.test"}, time.Now())
	if err := os.Rename(newKey, keyPath); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(newCert, certPath); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); CheckNames(f.Leaf(), "api.two.test") != nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still serving %v after the files changed", f.Leaf().DNSNames)
		}
	}
}

func TestLocalCASignsOnlyForItsNames(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	ca, err := OpenLocal(dir, "hutch.example", now)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	// Its key, were it taken, makes nothing a client accepts for other
	// names.
	for _, name := range []string{"www.example.com", "hutch.example.evil.test"} {
		c, err := ca.Issue([]string{name}, nil, now)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: pool, CurrentTime: now}); err == nil {
			t.Errorf("a certificate for %s from the local CA verifies", name)
		}
	}
	// Nor other kinds of identity: a client's, an e-mail address's.
	for _, tc := range []struct {
		name  string
		tmpl  func(*x509.Certificate)
		usage x509.ExtKeyUsage
	}{
		{"client auth", func(c *x509.Certificate) { c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth} }, x509.ExtKeyUsageClientAuth},
		{"e-mail", func(c *x509.Certificate) {
			c.EmailAddresses = []string{"ceo@bank.example"}
			c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageEmailProtection}
		}, x509.ExtKeyUsageEmailProtection},
	} {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)}
		tc.tmpl(tmpl)
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
		if err != nil {
			t.Fatal(err)
		}
		leaf, _ := x509.ParseCertificate(der)
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{tc.usage}}); err == nil {
			t.Errorf("a %s certificate from the local CA verifies", tc.name)
		}
	}
	// A later start for another domain is refused, saying what to do.
	if _, err := OpenLocal(dir, "other.example", now); err == nil || !strings.Contains(err.Error(), "may sign only for hutch.example, localhost, not other.example") {
		t.Errorf("OpenLocal for another domain: %v", err)
	}
	// A name under its domain is fine.
	if _, err := OpenLocal(dir, "eu.hutch.example", now); err != nil {
		t.Errorf("OpenLocal for a name under the CA's domain: %v", err)
	}
}
