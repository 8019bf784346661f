package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/google/renameio/v2"
)

// The cluster's PKI: one CA, made once by `hutch cluster ca`, that signs
// each node's certificate (`hutch cluster issue`). Nodes accept on their
// cluster listener, and etcd members on their peer and client URLs, only
// a client that shows a certificate of that CA. Written with crypto/x509:
// a CA and a leaf are a few fields, which no library makes simpler.

// File names in a CA directory and in a node's bundle.
const (
	CAFile      = "ca.pem"
	CAKeyFile   = "ca-key.pem"
	NodeFile    = "node.pem"
	NodeKeyFile = "node-key.pem"
)

// caLife and nodeLife are how long the cluster's CA and its nodes'
// certificates are valid.
const (
	caLife   = 10 * 365 * 24 * time.Hour
	nodeLife = 2 * 365 * 24 * time.Hour
)

// MakeCA writes a new cluster CA to dir (CAFile, and CAKeyFile at 0600).
// It refuses to replace one: every node's certificate hangs on it.
func MakeCA(dir string, now time.Time) error {
	if _, err := os.Stat(filepath.Join(dir, CAKeyFile)); err == nil {
		return fmt.Errorf("%s already holds a cluster CA: every node's certificate hangs on it; remove it yourself to start over", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "Hutch cluster CA", Organization: []string{"Hutch"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caLife),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := renameio.WriteFile(filepath.Join(dir, CAKeyFile), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return err
	}
	return renameio.WriteFile(filepath.Join(dir, CAFile), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

// Issue writes to out a node's bundle signed by the CA in caDir: CAFile,
// NodeFile and NodeKeyFile (0600). The certificate serves and
// authenticates (server and client auth) as name and as each of hosts
// (IP addresses or DNS names): every address peers and etcd members reach
// the node by.
func Issue(caDir, name string, hosts []string, out string, now time.Time) error {
	if name == "" {
		return errors.New("a node certificate needs the node's name")
	}
	caPEM, err := os.ReadFile(filepath.Join(caDir, CAFile))
	if err != nil {
		return fmt.Errorf("read the cluster CA: %w", err)
	}
	ca, err := tls.LoadX509KeyPair(filepath.Join(caDir, CAFile), filepath.Join(caDir, CAKeyFile))
	if err != nil {
		return fmt.Errorf("load the cluster CA from %s: %w", caDir, err)
	}
	caCert, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"Hutch cluster"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(nodeLife),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{name},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" && h != name {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, ca.PrivateKey)
	if err != nil {
		return err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o700); err != nil {
		return err
	}
	if err := renameio.WriteFile(filepath.Join(out, NodeKeyFile), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return err
	}
	if err := renameio.WriteFile(filepath.Join(out, NodeFile), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return renameio.WriteFile(filepath.Join(out, CAFile), caPEM, 0o644)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// TLSFiles are a node's certificate, its key and the cluster CA.
type TLSFiles struct {
	CA, Cert, Key string
}

// load reads the files: the pool of the CA and the node's certificate.
func (f TLSFiles) load() (*x509.CertPool, tls.Certificate, error) {
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("cluster CA: %w (make one with `hutch cluster ca` and a node bundle with `hutch cluster issue`)", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, tls.Certificate{}, fmt.Errorf("cluster CA %s: no certificate in it", f.CA)
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("node certificate: %w", err)
	}
	return pool, cert, nil
}

// ServerConfig is the TLS of a node's cluster listener: it shows the
// node's certificate and accepts only clients with one of the cluster CA.
func (f TLSFiles) ServerConfig() (*tls.Config, error) {
	pool, cert, err := f.load()
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
		NextProtos:   []string{"http/1.1"},
	}, nil
}

// ClientConfig is the TLS a node dials peers with: it trusts the cluster
// CA only and shows the node's certificate.
func (f TLSFiles) ClientConfig() (*tls.Config, error) {
	pool, cert, err := f.load()
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		MinVersion:   tls.VersionTLS13,
	}, nil
}
