//go:build !amd64

package native

import (
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/runtime/native/seccomp"
)

// sandboxProgram assembles the sandbox filter at run time; amd64 has it
// pre-assembled (seccomp_amd64.go).
func sandboxProgram() ([]unix.SockFilter, error) { return seccomp.Program() }
