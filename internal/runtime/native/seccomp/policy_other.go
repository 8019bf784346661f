//go:build !amd64

package seccomp

// NewestSyscall is 0 where syscalls are not classified (every architecture
// but amd64): the filter then refuses no number for being unknown.
const NewestSyscall = 0

// deniedByNumber is empty where syscalls are not classified.
var deniedByNumber []numbered

// AllowedSyscalls is not kept for this architecture.
var AllowedSyscalls []string
