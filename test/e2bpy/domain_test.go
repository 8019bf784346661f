package e2bpy

import (
	"testing"

	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// TestE2BPythonSDKWithDomain runs the same suite as a user of E2B's
// cloud runs it, by E2B_DOMAIN alone: the control plane at
// https://api.<domain>, each sandbox's envd at https://49983-<id>.<domain>,
// over TLS with the server's own CA (SSL_CERT_FILE), the client in the
// server's network namespace (names under .localhost resolve to
// loopback through libnss-myhostname).
func TestE2BPythonSDKWithDomain(t *testing.T) {
	python := venv(t)
	s := hutchtest.StartDomainServe(t, hutchBin.Path(t), hutchtest.DomainTestDomain)
	runPytest(t, s.NetnsCommand, python, "domain", s.DomainEnv())
}
