//go:build hutch_tls_pending

// The build tag above goes when branch tls (hutchtest.StartDomainServe,
// `hutch serve --domain D --tls-self-signed`) is merged: until then this
// file is written against that contract and not compiled.

package e2bpy

import (
	"testing"

	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// testDomain resolves to loopback without a hosts file: names under
// .localhost do, through libnss-myhostname.
const testDomain = "hutch.localhost"

// TestE2BPythonSDKWithDomain runs the same suite as a user of E2B's
// cloud runs it, by E2B_DOMAIN alone: the control plane at
// https://api.<domain>, each sandbox's envd at https://49983-<id>.<domain>,
// over TLS with the server's own CA (SSL_CERT_FILE), the client in the
// server's network namespace.
func TestE2BPythonSDKWithDomain(t *testing.T) {
	python := venv(t)
	s := hutchtest.StartDomainServe(t, hutchBin.Path(t), testDomain)
	runPytest(t, s.NetnsCommand, python, "domain", s.DomainEnv())
}
