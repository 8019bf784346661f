// Package tlscert gives `hutch serve` its serving certificate: the user's
// certificate and key files, read again whenever they change (Files), or
// one issued at each start by a local certificate authority that is made
// once and kept in the data dir (SelfSigned).
package tlscert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/google/renameio/v2"
)

// Files serves the certificate in a pair of PEM files and loads them again
// when they change: a renewal (certbot, cert-manager, a copy by hand)
// takes effect without a restart. A pair that fails to load is logged and
// the one before it is kept. Safe for concurrent use.
type Files struct {
	certFile, keyFile string
	check             func(*x509.Certificate) error
	logger            *slog.Logger
	cur               atomic.Pointer[tls.Certificate]
}

// LoadFiles loads the certificate chain in certFile and its private key in
// keyFile, and watches both until ctx is done. It fails when either cannot
// be read, they do not match, the certificate has expired or is not yet
// valid, or check (when not nil: the names it must cover) fails: a server
// must not start with a certificate its clients refuse. Later versions of
// the files must pass the same checks to replace it.
func LoadFiles(ctx context.Context, certFile, keyFile string, check func(*x509.Certificate) error, logger *slog.Logger) (*Files, error) {
	f := &Files{certFile: certFile, keyFile: keyFile, check: check, logger: logger}
	c, err := f.load(time.Now())
	if err != nil {
		return nil, err
	}
	f.cur.Store(c)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", certFile, err)
	}
	// The directories, not the files: a renewal usually writes new files
	// and renames them over the old (or swaps a symlink, as Kubernetes
	// does with secrets), which ends a watch on the file itself.
	for _, dir := range uniq(filepath.Dir(certFile), filepath.Dir(keyFile)) {
		if err := w.Add(dir); err != nil {
			w.Close()
			return nil, fmt.Errorf("watch %s: %w", dir, err)
		}
	}
	go f.watch(ctx, w)
	return f, nil
}

// GetCertificate returns the certificate loaded last
// (tls.Config.GetCertificate).
func (f *Files) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return f.cur.Load(), nil
}

// Leaf is the certificate served now.
func (f *Files) Leaf() *x509.Certificate { return f.cur.Load().Leaf }

func (f *Files) watch(ctx context.Context, w *fsnotify.Watcher) {
	defer w.Close()
	// Writers change a file in several steps (the certificate, then the
	// key): reload once things have been quiet for a moment.
	const settle = 200 * time.Millisecond
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			if ev.Has(fsnotify.Chmod) && !ev.Has(fsnotify.Write) {
				continue
			}
			timer.Reset(settle)
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			f.logger.Warn("watching the TLS certificate files", "err", err)
		case <-timer.C:
			f.reload()
		}
	}
}

// reload loads the files again, keeping the certificate served now when
// they are not a valid pair or still the same one.
func (f *Files) reload() {
	c, err := f.load(time.Now())
	if err != nil {
		f.logger.Error("the TLS certificate files changed but do not load: still serving the previous certificate",
			"cert", f.certFile, "key", f.keyFile, "err", err)
		return
	}
	if old := f.cur.Load(); old != nil && old.Leaf.Equal(c.Leaf) {
		return
	}
	f.cur.Store(c)
	f.logger.Info("TLS certificate reloaded", "subject", c.Leaf.Subject.String(), "names", c.Leaf.DNSNames, "expires", c.Leaf.NotAfter)
}

// load loads and checks the certificate and key.
func (f *Files) load(now time.Time) (*tls.Certificate, error) {
	c, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s with key %s: %w", f.certFile, f.keyFile, err)
	}
	if err := checkValid(c.Leaf, now); err != nil {
		return nil, fmt.Errorf("TLS certificate %s: %w", f.certFile, err)
	}
	if f.check != nil {
		if err := f.check(c.Leaf); err != nil {
			return nil, fmt.Errorf("TLS certificate %s: %w", f.certFile, err)
		}
	}
	return &c, nil
}

// checkValid fails for a certificate outside its validity period.
func checkValid(leaf *x509.Certificate, now time.Time) error {
	if leaf == nil {
		return errors.New("no certificate")
	}
	if now.After(leaf.NotAfter) {
		return fmt.Errorf("expired on %s", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	if now.Before(leaf.NotBefore) {
		return fmt.Errorf("not valid before %s", leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	return nil
}

// CheckNames fails when leaf is not valid for every name in names (a
// wildcard certificate for *.D serves "49983-<id>.D").
func CheckNames(leaf *x509.Certificate, names ...string) error {
	for _, n := range names {
		if err := leaf.VerifyHostname(n); err != nil {
			return err
		}
	}
	return nil
}

func uniq(a, b string) []string {
	if a == b {
		return []string{a}
	}
	return []string{a, b}
}

// writeFile replaces path with data, mode perm, atomically and durably:
// a CA's key must be whole on disk or not there at all.
func writeFile(path string, data []byte, perm os.FileMode) error {
	return renameio.WriteFile(path, data, perm, renameio.WithTempDir(filepath.Dir(path)), renameio.WithStaticPermissions(perm))
}
