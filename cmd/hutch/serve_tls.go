package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/hutch-sandbox/hutch/internal/tlscert"
)

// tlsFlags are hutch serve's TLS flags.
type tlsFlags struct {
	certFile, keyFile string
	selfSigned        bool
}

func (f *tlsFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.certFile, "tls-cert", "", "serve TLS with the certificate chain in this PEM `FILE` (for --domain D: valid for api.D and *.D); read again when it changes")
	fs.StringVar(&f.keyFile, "tls-key", "", "the private key of --tls-cert, a PEM `FILE`")
	fs.BoolVar(&f.selfSigned, "tls-self-signed", false, "serve TLS with a certificate from a local CA made once in DATA_DIR/tls (the CA's key 0600); clients must trust DATA_DIR/tls/ca.pem, as the server prints at start")
}

// config returns the TLS configuration hutch serve is to serve with, nil
// for plain HTTP. It fails when the flags disagree or the certificate would
// be refused by the clients (expired, not for the domain). The local CA's
// trust instructions are written to out.
func (f *tlsFlags) config(ctx context.Context, dataDir, domain string, out io.Writer, logger *slog.Logger) (*tls.Config, error) {
	switch {
	case f.selfSigned && (f.certFile != "" || f.keyFile != ""):
		return nil, errors.New("--tls-self-signed or --tls-cert/--tls-key, not both")
	case (f.certFile == "") != (f.keyFile == ""):
		return nil, errors.New("--tls-cert and --tls-key go together")
	case f.certFile != "":
		var check func(*x509.Certificate) error
		if domain != "" {
			// What the SDKs ask for: the API and a sandbox's envd.
			check = func(leaf *x509.Certificate) error {
				return tlscert.CheckNames(leaf, "api."+domain, "49983-sandbox."+domain)
			}
		}
		files, err := tlscert.LoadFiles(ctx, f.certFile, f.keyFile, check, logger)
		if err != nil {
			return nil, err
		}
		leaf := files.Leaf()
		logger.Info("serving TLS", "cert", f.certFile, "names", leaf.DNSNames, "expires", leaf.NotAfter)
		return &tls.Config{GetCertificate: files.GetCertificate}, nil
	case f.selfSigned:
		now := time.Now()
		ca, err := tlscert.OpenLocal(filepath.Join(dataDir, "tls"), domain, now)
		if err != nil {
			return nil, fmt.Errorf("--tls-self-signed: %w", err)
		}
		names, ips := tlscert.ServeNames(domain)
		cert, err := ca.Issue(names, ips, now)
		if err != nil {
			return nil, fmt.Errorf("--tls-self-signed: %w", err)
		}
		logger.Info("serving TLS with a certificate of the local CA", "ca", ca.CertFile, "names", names)
		fmt.Fprintf(out, `TLS: the certificate is from this server's own CA, %[1]s. Clients must trust it:
  Python (E2B SDK):  export SSL_CERT_FILE=%[1]s
  Node.js (E2B SDK): export NODE_EXTRA_CA_CERTS=%[1]s
  curl:              curl --cacert %[1]s ...
  this whole host:   cp %[1]s /usr/local/share/ca-certificates/hutch.crt && update-ca-certificates
`, ca.CertFile)
		if domain != "" {
			fmt.Fprintf(out, "SDKs reach this server with: export E2B_DOMAIN=%s (names api.%[1]s and *.%[1]s must resolve to it: docs/tls.md)\n", domain)
		}
		return &tls.Config{Certificates: []tls.Certificate{*cert}}, nil
	}
	return nil, nil
}
