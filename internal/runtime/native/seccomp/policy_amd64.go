package seccomp

import "golang.org/x/sys/unix"

// NewestSyscall is the highest syscall number classified here (the newest
// in golang.org/x/sys's amd64 table); higher numbers fail with ENOSYS.
const NewestSyscall = unix.SYS_RSEQ_SLICE_YIELD

// deniedByNumber are denied syscalls go-seccomp-bpf's table does not name
// yet; the prologue refuses them with EPERM.
var deniedByNumber = []numbered{
	// listns (Linux 6.18) enumerates namespaces by id, the host's included.
	{"listns", unix.SYS_LISTNS},
}

// AllowedSyscalls are allowed on purpose: every amd64 syscall that is in
// neither DeniedSyscalls, AbsentSyscalls, Conditional nor deniedByNumber. When
// golang.org/x/sys gains a syscall, a test fails until it is added here or
// to a deny list (and NewestSyscall moves up); until then the filter
// refuses it.
var AllowedSyscalls = []string{
	"read", "write", "open", "close", "stat", "fstat", "lstat", "poll", "lseek", "mmap",
	"mprotect", "munmap", "brk", "rt_sigaction", "rt_sigprocmask", "rt_sigreturn",
	"pread64", "pwrite64", "readv", "writev", "access", "pipe", "select", "sched_yield",
	"mremap", "msync", "mincore", "madvise", "shmget", "shmat", "shmctl", "dup", "dup2",
	"pause", "nanosleep", "getitimer", "alarm", "setitimer", "getpid", "sendfile",
	"connect", "accept", "sendto", "recvfrom", "sendmsg", "recvmsg", "shutdown", "bind",
	"listen", "getsockname", "getpeername", "setsockopt", "getsockopt", "fork", "vfork",
	"execve", "exit", "wait4", "kill", "uname", "semget", "semop", "semctl", "shmdt",
	"msgget", "msgsnd", "msgrcv", "msgctl", "fcntl", "flock", "fsync", "fdatasync",
	"truncate", "ftruncate", "getdents", "getcwd", "chdir", "fchdir", "rename", "mkdir",
	"rmdir", "creat", "link", "unlink", "symlink", "readlink", "chmod", "fchmod", "chown",
	"fchown", "lchown", "umask", "gettimeofday", "getrlimit", "getrusage", "sysinfo",
	"times", "ptrace", "getuid", "getgid", "setuid", "setgid", "geteuid", "getegid",
	"setpgid", "getppid", "getpgrp", "setsid", "setreuid", "setregid", "getgroups",
	"setgroups", "setresuid", "getresuid", "setresgid", "getresgid", "getpgid", "setfsuid",
	"setfsgid", "getsid", "capget", "capset", "rt_sigpending", "rt_sigtimedwait",
	"rt_sigqueueinfo", "rt_sigsuspend", "sigaltstack", "utime", "mknod", "statfs",
	"fstatfs", "getpriority", "setpriority", "sched_setparam", "sched_getparam",
	"sched_setscheduler", "sched_getscheduler", "sched_get_priority_max",
	"sched_get_priority_min", "sched_rr_get_interval", "mlock", "munlock", "mlockall",
	"munlockall", "modify_ldt", "prctl", "arch_prctl", "adjtimex", "setrlimit", "chroot",
	"sync", "sethostname", "setdomainname", "getpmsg", "putpmsg", "afs_syscall", "tuxcall",
	"security", "gettid", "readahead", "setxattr", "lsetxattr", "fsetxattr", "getxattr",
	"lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr", "removexattr",
	"lremovexattr", "fremovexattr", "tkill", "time", "futex", "sched_setaffinity",
	"sched_getaffinity", "set_thread_area",
	"get_thread_area", "epoll_create", "epoll_ctl_old",
	"epoll_wait_old", "remap_file_pages", "getdents64", "set_tid_address",
	"restart_syscall", "semtimedop", "fadvise64", "timer_create", "timer_settime",
	"timer_gettime", "timer_getoverrun", "timer_delete", "clock_gettime", "clock_getres",
	"clock_nanosleep", "exit_group", "epoll_wait", "epoll_ctl", "tgkill", "utimes",
	"vserver", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify",
	"mq_getsetattr", "waitid", "ioprio_set", "ioprio_get", "inotify_init",
	"inotify_add_watch", "inotify_rm_watch", "migrate_pages", "openat", "mkdirat",
	"mknodat", "fchownat", "futimesat", "newfstatat", "unlinkat", "renameat", "linkat",
	"symlinkat", "readlinkat", "fchmodat", "faccessat", "pselect6", "ppoll",
	"set_robust_list", "get_robust_list", "splice", "tee", "sync_file_range", "vmsplice",
	"utimensat", "epoll_pwait", "signalfd", "timerfd_create", "eventfd", "fallocate",
	"timerfd_settime", "timerfd_gettime", "accept4", "signalfd4", "eventfd2",
	"epoll_create1", "dup3", "pipe2", "inotify_init1", "preadv", "pwritev",
	"rt_tgsigqueueinfo", "recvmmsg", "fanotify_mark", "prlimit64", "syncfs", "sendmmsg",
	"getcpu", "sched_setattr", "sched_getattr", "renameat2", "seccomp", "getrandom",
	"memfd_create", "execveat", "membarrier", "mlock2", "copy_file_range", "preadv2",
	"pwritev2", "pkey_mprotect", "pkey_alloc", "pkey_free", "statx",
	"rseq", "uretprobe", "uprobe", "pidfd_send_signal", "pidfd_open", "close_range",
	"openat2", "faccessat2", "epoll_pwait2", "landlock_create_ruleset", "landlock_add_rule",
	"landlock_restrict_self", "memfd_secret", "process_mrelease", "futex_waitv",
	"cachestat", "fchmodat2", "map_shadow_stack", "futex_wake", "futex_wait",
	"futex_requeue", "lsm_get_self_attr", "lsm_set_self_attr", "lsm_list_modules", "mseal",
	"setxattrat", "getxattrat", "listxattrat", "removexattrat", "file_getattr",
	"file_setattr", "rseq_slice_yield",
}
