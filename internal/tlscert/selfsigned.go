package tlscert

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The local CA's files in its directory (DATA_DIR/tls).
const (
	// CAFile is the CA's certificate: what clients are told to trust.
	CAFile = "ca.pem"
	// CAKeyFile is its private key, mode 0600.
	CAKeyFile = "ca-key.pem"
)

const (
	caLifetime = 10 * 365 * 24 * time.Hour
	// serveLifetime stays under the 398 days browsers accept; the
	// certificate is issued again at every start anyway.
	serveLifetime = 397 * 24 * time.Hour
)

// Local is a certificate authority of this host alone, for
// --tls-self-signed.
type Local struct {
	// CertFile is the CA certificate's path.
	CertFile string
	cert     *x509.Certificate
	key      crypto.Signer
}

// OpenLocal loads the CA kept in dir, making it (and dir) the first
// time, for domain (may be empty): the CA may only sign for domain and the
// names under it, localhost and the loopback addresses (X.509 name
// constraints), so that its key, were it ever taken, could not make
// certificates for anything else to a host that trusts it. A CA whose
// files are damaged, whose key is readable by others, or whose
// constraints leave domain out is an error rather than replaced: clients
// trust it by now.
func OpenLocal(dir, domain string, now time.Time) (*Local, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	certPath, keyPath := filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile)
	_, certErr := os.Stat(certPath)
	_, keyErr := os.Stat(keyPath)
	switch {
	case errors.Is(certErr, fs.ErrNotExist) && errors.Is(keyErr, fs.ErrNotExist):
		if err := makeCA(certPath, keyPath, domain, now); err != nil {
			return nil, fmt.Errorf("make the local CA in %s: %w", dir, err)
		}
	case certErr != nil:
		return nil, fmt.Errorf("local CA: %w", certErr)
	case keyErr != nil:
		return nil, fmt.Errorf("local CA: %w", keyErr)
	}
	ca, err := loadCA(certPath, keyPath, now)
	if err != nil {
		return nil, err
	}
	if domain != "" && len(ca.cert.PermittedDNSDomains) > 0 && !permits(ca.cert.PermittedDNSDomains, domain) {
		return nil, fmt.Errorf("local CA %s may sign only for %s, not %s (it was made for another --domain): remove %s and %s to make a new one, then have clients trust it again",
			certPath, strings.Join(ca.cert.PermittedDNSDomains, ", "), domain, certPath, keyPath)
	}
	return ca, nil
}

// permits reports whether a name constraint list lets a CA sign for
// domain and the names under it.
func permits(permitted []string, domain string) bool {
	for _, p := range permitted {
		if domain == p || strings.HasSuffix(domain, "."+p) {
			return true
		}
	}
	return false
}

func makeCA(certPath, keyPath, domain string, now time.Time) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{Organization: []string{"Hutch"}, CommonName: "Hutch local CA (" + host + ")"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		// A constraint on a name covers the names under it too.
		PermittedDNSDomainsCritical: true,
		PermittedDNSDomains:         append(nonEmpty(domain), "localhost"),
		PermittedIPRanges: []*net.IPNet{
			{IP: net.IPv4(127, 0, 0, 0).To4(), Mask: net.CIDRMask(8, 32)},
			{IP: net.IPv6loopback, Mask: net.CIDRMask(128, 128)},
		},
		// Nor any other kind of identity (review 24): e-mail and URI
		// names only under the reserved .invalid, and certificates for
		// TLS servers only (verifiers apply a CA's key usages to what it
		// signs).
		PermittedEmailAddresses: []string{"invalid"},
		PermittedURIDomains:     []string{"invalid"},
		ExtKeyUsage:             []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	// The key first: a certificate without its key is an error at the
	// next start, a key without its certificate would be too.
	if err := writeFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return writeFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func loadCA(certPath, keyPath string, now time.Time) (*Local, error) {
	if st, err := os.Stat(keyPath); err != nil {
		return nil, err
	} else if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("local CA key %s is mode %v: others may read it; chmod 600 it", keyPath, st.Mode().Perm())
	}
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, fmt.Errorf("local CA %s: %w", certPath, err)
	}
	if !pair.Leaf.IsCA {
		return nil, fmt.Errorf("local CA %s is not a CA certificate", certPath)
	}
	if err := checkValid(pair.Leaf, now); err != nil {
		return nil, fmt.Errorf("local CA %s: %w (remove %s and %s to make a new one, then trust it again)",
			certPath, err, certPath, keyPath)
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("local CA key %s cannot sign", keyPath)
	}
	return &Local{CertFile: certPath, cert: pair.Leaf, key: signer}, nil
}

// Issue makes a serving certificate, signed by the CA, for dnsNames and
// ips; its chain includes the CA.
func (ca *Local) Issue(dnsNames []string, ips []net.IP, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(serveLifetime)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	cn := "hutch serve"
	if len(dnsNames) > 0 {
		cn = dnsNames[0]
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{Organization: []string{"Hutch"}, CommonName: cn},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: key, Leaf: leaf}, nil
}

// ServeNames are the names a serving certificate for domain covers: the
// domain, every name one label under it (api.D, <port>-<id>.D) and, for
// clients on the host itself, localhost and the loopback addresses.
func ServeNames(domain string) ([]string, []net.IP) {
	names := []string{}
	if domain != "" {
		names = append(names, domain, "*."+domain)
	}
	names = append(names, "localhost")
	return names, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// serial is a random 128-bit serial number, as RFC 5280 wants them unique.
func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}
