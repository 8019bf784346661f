// Package cluster_test tests Hutch's cluster mode (issue 21) as its users
// meet it: real `hutch serve --cluster` nodes, each in a network
// namespace of its own on a LAN of namespaces (hutchtest.NewLAN), over an
// embedded etcd (a member on each node) or an external one (Debian's
// etcd-server); the official E2B JS SDK and plain HTTP through any node;
// nodes killed, partitioned, healed and restarted.
package cluster_test

import (
	"testing"

	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// hutchBin is cmd/hutch built from this checkout, once.
var hutchBin = &hutchtest.Binary{ModuleRoot: "../.."}

func TestMain(m *testing.M) { hutchtest.Main(m, hutchBin) }
