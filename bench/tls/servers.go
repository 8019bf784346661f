package main

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
	"github.com/hutch-sandbox/hutch/internal/tlscert"
)

// waitHealthy polls url (through c, whose answers must be 2xx) until it
// answers, p exits or 30 s pass.
func waitHealthy(ctx context.Context, p *harness.Process, c func() (*http.Client, error), url string) error {
	deadline := time.Now().Add(30 * time.Second)
	var last error
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if p.Exited() {
			return fmt.Errorf("%s exited: %s", p.Name, p.LogTail())
		}
		if hc, err := c(); err != nil {
			last = err
		} else if resp, err := hc.Get(url); err != nil {
			last = err
		} else {
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return nil
			}
			last = errors.New(resp.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer %s within 30 s (%v): %s", p.Name, url, last, p.LogTail())
}

// startServe starts `hutch serve` with the data directory and key of the
// run and flags, its log in the work directory as name.log.
func (b *bench) startServe(name string, flags ...string) (*harness.Process, error) {
	argv := append([]string{b.cfg.hutch, "serve"}, flags...)
	fmt.Printf("==> hutch %s\n", strings.Join(argv[1:], " "))
	return harness.Launch("hutch serve", filepath.Join(b.cfg.dir, name+".log"),
		[]string{"HUTCH_DATA_DIR=" + b.cfg.data, "HUTCH_API_KEY=" + b.key}, argv...)
}

// caFile is the local CA of --tls-self-signed in the run's data directory.
func (b *bench) caFile() string { return filepath.Join(b.cfg.data, "tls", tlscert.CAFile) }

// caPool is the pool of that CA alone, once the server has made it.
func (b *bench) caPool() (*x509.CertPool, error) {
	data, err := os.ReadFile(b.caFile())
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s holds no certificate", b.caFile())
	}
	return pool, nil
}

// issueNginxCert writes, for nginx, a serving certificate made as hutch
// serve --tls-self-signed makes its own: from the same CA, for the same
// names, an ECDSA P-256 key, the chain with the CA.
func (b *bench) issueNginxCert() (certFile, keyFile string, err error) {
	ca, err := tlscert.OpenLocal(filepath.Dir(b.caFile()), b.cfg.domain, time.Now())
	if err != nil {
		return "", "", err
	}
	names, ips := tlscert.ServeNames(b.cfg.domain)
	cert, err := ca.Issue(names, ips, time.Now())
	if err != nil {
		return "", "", err
	}
	var chain []byte
	for _, der := range cert.Certificate {
		chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		return "", "", err
	}
	certFile = filepath.Join(b.cfg.dir, "nginx", "fullchain.pem")
	keyFile = filepath.Join(b.cfg.dir, "nginx", "privkey.pem")
	if err := os.WriteFile(certFile, chain, 0o644); err != nil {
		return "", "", err
	}
	return certFile, keyFile, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}), 0o600)
}

// nginxConf is docs/tls.md's "Behind a reverse proxy" server block in
// Debian's own /etc/nginx/nginx.conf, where a Debian user puts it: its
// http-level settings (TLS 1.0-1.3: nginx 1.22 alone offers no TLS 1.3;
// sendfile, gzip for text/html), paths in the work directory and no
// access log. Two changes to the server block: `listen … ssl http2` in
// place of `listen … ssl; http2 on;`, which only nginx 1.25.1 and later
// know (Debian 12 has 1.22), and, when KeepAlive, an upstream block whose
// connections to Hutch are kept alive (the docs' `Connection
// $connection_upgrade` sends "close" on every request that is not an
// upgrade, so each one opens a new connection to Hutch).
var nginxConf = template.Must(template.New("nginx.conf").Parse(`# made by bench/tls
worker_processes auto;
pid {{.Dir}}/nginx.pid;
error_log {{.Dir}}/error.log warn;
events { worker_connections 768; }
http {
    sendfile on;
    tcp_nopush on;
    default_type application/octet-stream;
    ssl_protocols TLSv1 TLSv1.1 TLSv1.2 TLSv1.3;
    ssl_prefer_server_ciphers on;
    access_log off;
    gzip on;
    client_body_temp_path {{.Dir}}/body;
    proxy_temp_path {{.Dir}}/proxy;
    fastcgi_temp_path {{.Dir}}/fastcgi;
    uwsgi_temp_path {{.Dir}}/uwsgi;
    scgi_temp_path {{.Dir}}/scgi;
{{- if .KeepAlive}}
    upstream hutch {
        server {{.Upstream}};
        keepalive 64;
    }
    map $http_upgrade $connection_upgrade { default upgrade; '' ''; }
{{- else}}
    map $http_upgrade $connection_upgrade { default upgrade; '' close; }
{{- end}}
    server {
        listen 127.0.0.1:443 ssl http2;
        server_name {{.Domain}} *.{{.Domain}};
        ssl_certificate     {{.Cert}};
        ssl_certificate_key {{.Key}};
        client_max_body_size 0;
        location / {
            proxy_pass http://{{if .KeepAlive}}hutch{{else}}{{.Upstream}}{{end}};
            proxy_http_version 1.1;
            proxy_set_header Host $host;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_read_timeout 1d;
            proxy_send_timeout 1d;
        }
    }
}
`))

// startNginx writes the configuration (keepAlive: see nginxConf) and
// starts nginx in the foreground with it, proxying to upstream.
func (b *bench) startNginx(keepAlive bool, upstream string) (*harness.Process, error) {
	dir := filepath.Join(b.cfg.dir, "nginx")
	certFile, keyFile := filepath.Join(dir, "fullchain.pem"), filepath.Join(dir, "privkey.pem")
	var conf strings.Builder
	err := nginxConf.Execute(&conf, map[string]any{"Dir": dir, "Domain": b.cfg.domain, "Cert": certFile,
		"Key": keyFile, "Upstream": upstream, "KeepAlive": keepAlive})
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf.String()), 0o644); err != nil {
		return nil, err
	}
	if out, err := exec.Command(b.cfg.nginx, "-t", "-q", "-p", dir, "-c", path).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("nginx -t: %v: %s", err, strings.TrimSpace(string(out)))
	}
	fmt.Printf("==> nginx -p %s -c %s (keep-alive upstream: %v)\n", dir, path, keepAlive)
	return harness.Launch("nginx", filepath.Join(b.cfg.dir, "nginx.log"), nil,
		b.cfg.nginx, "-p", dir, "-c", path, "-g", "daemon off;")
}

// nginxVersion is `nginx -v`'s answer, and the OpenSSL it runs with.
func nginxVersion(bin string) string {
	out, err := exec.Command(bin, "-V").CombinedOutput()
	if err != nil {
		return "nginx (not installed)"
	}
	var parts []string
	for _, l := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasPrefix(l, "nginx version: "):
			parts = append(parts, strings.TrimPrefix(l, "nginx version: "))
		case strings.HasPrefix(l, "built with "):
			parts = append(parts, l)
		}
	}
	return harness.OneLine(strings.Join(parts, ", "))
}
