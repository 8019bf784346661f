package sdk

import (
	"testing"

	"github.com/hutch-sandbox/hutch/internal/envdtest"
)

// The test binary is also the envd of the sandboxes that tests against a
// real control plane (servertest) make.
func TestMain(m *testing.M) { envdtest.Main(m) }
