// Package gvisor is Hutch's second runtime backend: each sandbox runs
// under gVisor's runsc, a kernel in user space (the Sentry) between the
// sandbox's code and the host's, with the systrap platform (no KVM on
// these hosts). It implements runtime.Runtime and runtime.Checkpointer and
// passes internal/runtime/runtimetest. docs/runtime.md ("The gvisor tier")
// draws a sandbox's parts; in short:
//
//	hutch (Create) ── mounts the root on the host, writes the OCI bundle,
//	  │               starts the shim, waits for its report
//	  └─ shim (shim.go: own session and network namespace; outlives hutch)
//	       └─ runsc --network=host run|restore   (stdin: the link)
//	            └─ PID 1: GuestInit (guest.go)
//	                 └─ the first process (envd: its host sockets arrive
//	                    as channels of the link on its stdin, package link)
//
// What this rests on, established on these hosts (kernel 6.18, 2 cores,
// runsc built pinned by scripts/setup.sh):
//
//   - The root is the template's layers, idmapped into the sandbox's uid
//     range (without the idmap files show as 65534), under a read-only
//     overlay; the writable layer is runsc's --overlay2=root:dir=<upper>
//     (never root:self, which writes into the template), sized to the disk
//     limit. runsc mounts a tmpfs of its own on an empty /tmp: a file keeps
//     /tmp in the layer (tmpMarker).
//   - A listening socket donated with --pass-fd does not work inside
//     (accept fails with EINVAL), and `runsc restore` takes no --pass-fd:
//     only PID 1's stdio is rewired by a restore. Hence the link on stdin.
//   - gVisor's netstack reads its interfaces once, at boot, and Hutch
//     attaches a sandbox's link after: runsc runs with --network=host in
//     a namespace of the sandbox's own; checkpoints keep its listening
//     sockets.
//   - pids.max counts runsc's own host threads and crashes the sandbox
//     when reached: guest processes are bounded with RLIMIT_NPROC, which
//     counts per uid (root inside switches uids), so pids.max bounds them
//     too, at a multiple of the limit with room for runsc (hostPids).
//   - Checkpoint/restore keeps every process's memory (10 MiB: 28 ms to
//     save, 15 MB image, 90-120 ms to restore); one image restores any
//     number of times (fork); only PID 1's tree is restored, so envd
//     starts every user process itself (it does). runsc restores only
//     under the saved uid mapping: a checkpoint holds its sandbox's range
//     (native.HoldIDs), and forks share it.
//   - setuid programs need --allow-suid (no_new_privs still stops them).
//   - Image roots (runtime.ImageRoot, images.go): runsc has no per-mount
//     writable overlay that spares the volumes, so each is the host's
//     overlay of its idmapped layers under a writable layer in upper/,
//     served as a bind; a /proc of its own, the sandbox's /dev (nosuid,
//     a /dev/shm of its own) and the image's Binds (paths of the Sentry's
//     own, nosuid and nodev) are mounted in by PID 1, which starts as
//     root with CAP_SYS_ADMIN for that and execs itself again as the first
//     process's user. Such a sandbox is not checkpointed. Create refuses
//     image roots (a 501): gVisor's procfs has no hidepid, and an image
//     root's /proc would show every process of the sandbox to a program
//     of the image (errImagesProc).
//   - Missing: io_uring; inotify of host changes to bind mounts. runsc
//     leaves its state and cgroup directories behind when killed: Sweep.
//     Ids that prefix one another are ambiguous to runsc: Hutch's are all
//     of one length.
package gvisor
