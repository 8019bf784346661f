// Package gvisor will be Hutch's second runtime backend (issue 19): each
// sandbox runs under gVisor's runsc, a user-space kernel between the
// sandbox's code and the host's, with the systrap platform (no KVM on these
// hosts). It is not written yet; this file keeps what was established for
// it, so that the backend is built on facts.
//
// Probed on these hosts (kernel 6.18, 2 cores):
//
//   - runsc is built pinned by scripts/setup.sh from the Go module proxy
//     (gvisor.dev/gvisor/runsc@v0.0.0-20260905035102-160fafc42237, about a
//     minute with a warm module cache) into /var/cache/hutch/runsc and
//     installed as /usr/local/lib/hutch/runsc. `runsc --platform=systrap
//     --network=none do /bin/echo` takes 88 ms here.
//   - The root: the template through the native backend's idmapped
//     read-only mounts (without an idmap files show as 65534), the writable
//     layer as --overlay2=root:dir=<dir> on disk (never root:self, which
//     writes into the template).
//   - Limits: cgroup v1 cgroupsPath works on hybrid hosts; pids.max counts
//     host tasks and crashes the sandbox when reached: bound guest
//     processes with RLIMIT_NPROC instead.
//   - Checkpoint/restore keeps memory (10 MiB: 28 ms, 15 MB image,
//     restore 90-120 ms); one image restores N times (fork); only PID 1's
//     tree is restored, so envd must start every user process itself (it
//     does).
//   - Missing: io_uring; inotify of host changes to bind mounts. runsc
//     leaks cgroup directories when a create fails or it is killed: clean
//     them up. Container ids that prefix one another are ambiguous: use
//     fixed-length ids (Hutch's are).
//
// Reaching envd inside (tried 2026-11-26 with the pinned runsc, systrap,
// --network=none, --overlay2=root:memory, root over the base layer):
//
//   - A listening unix socket donated with `runsc run --pass-fd M:N` is
//     not usable inside: it shows as host:[N], getsockname is empty and
//     accept fails with EINVAL. The native backend's way (envd serves
//     listening sockets it inherits as fds 3 and 4) does not carry over.
//   - A connected socket (one end of a socketpair) donated the same way
//     works both ways. So envd could be reached over one donated
//     connection, multiplexed (hashicorp/yamux) into control and API
//     streams: nothing a process of the sandbox can reach by a path.
//   - A socket envd binds inside a bind-mounted host directory, with
//     runsc --host-uds=create, is reachable from the host by its path. But
//     the path is visible inside the sandbox too: its root (sudo) could
//     dial envd's control socket, which the native backend never allows.
//     Either hide the directory from user processes (a mount namespace
//     inside, without it) or use the donated connection above.
//   - Package link (internal/runtime/gvisor/link) is that multiplexed link
//     over PID 1's standard input, resynchronising by itself after a
//     restore, a fork or a shim's restart.
//
// The plan (issue 19): implement runtime.Runtime and runtime.Checkpointer
// (Checkpoint, Restore) here, pass internal/runtime/runtimetest, and let
// internal/sandbox use Checkpointer where Capabilities says it works: a
// pause keeping memory that frees RAM, snapshots with processes, forks
// from one image.
package gvisor
