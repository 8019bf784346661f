package native

import (
	"bytes"
	"cmp"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// The kernel charges a socket's receive queue to the memory cgroup of its
// owner only for protocols that account their memory (TCP, UDP, unix
// sockets). Netlink and ICMP ("ping") sockets queue their replies
// uncharged: a sandbox asking the kernel for its link table on a few
// hundred netlink sockets it never reads parks gigabytes of host memory
// while its own memory counter stays at a few MiB (review 2, A11: +6 GB in
// a 256 MiB sandbox). No cgroup setting covers this, so the sandbox's init
// watches the queues itself: every socket of the sandbox's network
// namespace is listed, with its queue, in /proc/self/net, and the init,
// root of the sandbox's user namespace, can see and kill every sandbox
// process. Its polling is charged to the sandbox, as is the kernel's work
// of filling the queues, so neither can outrun the other by more than a
// poll's worth of the sandbox's CPU time.

// sockGuardInterval is how often the init reads the queues: at the ~350 MB/s
// one CPU fills netlink queues, a quarter second is ~90 MB past the budget.
// ICMP sockets fill faster (~2.5 GB/s of echo replies over loopback), so
// the sandbox's network namespace takes ICMP in only at icmpRate
// (icmplimit.go).
const sockGuardInterval = 250 * time.Millisecond

// sockBudget is how much the uncharged queues of a sandbox with the given
// memory limit may hold together: a quarter of the limit (programs that
// read their replies hold kilobytes), at least 4 MiB; none without a
// limit, since such a sandbox may take the host's memory anyway.
func sockBudget(memory int64) int64 {
	if memory <= 0 {
		return 0
	}
	return max(memory/4, 4<<20)
}

// uncharged is where the kernel lists the sockets whose queues no cgroup
// pays for, with the column of the queue and of the inode, and the name
// /proc/self/net/protocols gives the protocol. Raw and packet sockets need
// CAP_NET_RAW, which sandbox processes lack; they are read anyway, in case
// a template's capabilities ever change.
//
// The protocols file counts each protocol's sockets in the reader's
// network namespace, without listing them, in a few dozen lines; the
// socket tables are read only when one of these counts is not zero.
// /proc/self/net/netlink is the reason: the kernel walks every netlink
// socket of the host to list one namespace's (each namespace has a few of
// its own), so with a thousand sandboxes each poll of each init cost ~0.4
// ms and their polls together took both of a 2-core host's CPUs
// (bench/density.sh, issue 16). In an idle sandbox the counts are zero:
// the kernel's own netlink sockets are not counted.
var uncharged = []struct {
	file       string
	queue, ino int    // columns, after a heading line
	hexTxRx    bool   // the queue column is tx_queue:rx_queue in hex
	protocol   string // its line in /proc/self/net/protocols
}{
	{"netlink", 4, 9, false, "NETLINK"},
	{"icmp", 4, 9, true, "PING"},
	{"icmp6", 4, 9, true, "PINGv6"},
	{"raw", 4, 9, true, "RAW"},
	{"raw6", 4, 9, true, "RAWv6"},
	{"packet", 6, 8, false, "PACKET"},
}

// sockGuard keeps a sandbox's uncharged socket queues under a budget by
// killing the processes that hold the fullest ones, as the OOM killer
// would (SIGKILL, exit 137).
type sockGuard struct {
	budget int64
	proc   string     // procfs of the sandbox's pid and network namespaces
	self   int        // the init's pid, never killed
	files  []*os.File // uncharged's files, kept open
	protos *os.File   // /proc/self/net/protocols, kept open; nil: none
	opened bool       // protos was opened (or tried)
	buf    []byte
}

// anyUncharged reports whether the sandbox's network namespace has any
// socket of an uncharged protocol, or might: true when the counts cannot
// be read.
func (g *sockGuard) anyUncharged() bool {
	if !g.opened {
		g.opened = true
		g.protos, _ = os.Open(filepath.Join(g.proc, "self/net/protocols"))
	}
	if g.protos == nil {
		return true
	}
	g.buf = readAll(g.protos, g.buf[:0])
	found := false
	for rest := g.buf; len(rest) > 0; {
		var line []byte
		line, rest = nextLine(rest)
		name := field(line, 0)
		for _, u := range uncharged {
			if string(name) == u.protocol {
				if n, ok := parseUint(field(line, 2), 10); !ok || n > 0 {
					return true
				}
				found = true
			}
		}
	}
	// Counts of none of them: a kernel without the file's usual lines.
	return !found
}

// check reads the queues once and, over the budget, kills the holders of
// the fullest sockets until what is left is at most half the budget. It
// returns the pids it killed.
func (g *sockGuard) check() []int {
	if !g.anyUncharged() || g.queues(nil) <= g.budget {
		return nil
	}
	queues := map[uint64]int64{}
	total := g.queues(queues)
	holders := g.holders()
	inos := make([]uint64, 0, len(queues))
	for ino := range queues {
		inos = append(inos, ino)
	}
	slices.SortFunc(inos, func(a, b uint64) int { return cmp.Compare(queues[b], queues[a]) })
	var killed []int
	seen := map[int]bool{}
	for _, ino := range inos {
		if total <= g.budget/2 {
			break
		}
		for _, pid := range holders[ino] {
			if !seen[pid] {
				seen[pid] = true
				unix.Kill(pid, unix.SIGKILL)
				killed = append(killed, pid)
			}
		}
		if len(holders[ino]) > 0 {
			total -= queues[ino]
		}
	}
	if total > g.budget {
		// The queues left belong to sockets no process holds open: ones in
		// flight in a unix socket's SCM_RIGHTS. Whatever sent them goes too,
		// and that is any process: kill(-1) from the init reaches every
		// process of its pid namespace but the init.
		unix.Kill(-1, unix.SIGKILL)
		killed = append(killed, -1)
	}
	return killed
}

// queues adds the receive queue of every uncharged socket that has one to
// into, by inode, when into is not nil, and returns their sum. The files
// stay open between polls: reading an open /proc/net file again from
// offset 0 costs a microsecond or two where opening it costs ~30. With
// into nil it allocates nothing once the buffer has grown: the init polls
// it for the sandbox's whole life, and garbage would make Go's runtime
// collect it, starting threads to do so, which it cannot while a fork
// bomb holds every pid of the sandbox (the runtime then dies, and the
// sandbox with it).
func (g *sockGuard) queues(into map[uint64]int64) int64 {
	if g.files == nil {
		g.files = make([]*os.File, len(uncharged))
		for i, u := range uncharged {
			// Missing: no IPv6, or no packet sockets in this kernel.
			g.files[i], _ = os.Open(filepath.Join(g.proc, "self/net", u.file))
		}
	}
	var total int64
	for i, u := range uncharged {
		if g.files[i] == nil {
			continue
		}
		g.buf = readAll(g.files[i], g.buf[:0])
		rest := g.buf
		first := true
		for len(rest) > 0 {
			var line []byte
			line, rest = nextLine(rest)
			if first { // the heading
				first = false
				continue
			}
			qf := field(line, u.queue)
			if u.hexTxRx {
				if c := bytes.IndexByte(qf, ':'); c >= 0 {
					qf = qf[c+1:]
				} else {
					qf = nil
				}
			}
			base := 10
			if u.hexTxRx {
				base = 16
			}
			q, ok := parseUint(qf, base)
			ino, iok := parseUint(field(line, u.ino), 10)
			if !ok || !iok || q == 0 || q > 1<<62 {
				continue
			}
			if into != nil {
				into[ino] += int64(q)
			}
			total += int64(q)
		}
	}
	return total
}

// nextLine splits b after its first line, which it returns without its
// newline.
func nextLine(b []byte) (line, rest []byte) {
	if n := bytes.IndexByte(b, '\n'); n >= 0 {
		return b[:n], b[n+1:]
	}
	return b, nil
}

// field returns the n-th (from 0) field of line separated by spaces or
// tabs, nil if there is none; it does not copy.
func field(line []byte, n int) []byte {
	for {
		for len(line) > 0 && (line[0] == ' ' || line[0] == '\t') {
			line = line[1:]
		}
		if len(line) == 0 {
			return nil
		}
		end := 0
		for end < len(line) && line[end] != ' ' && line[end] != '\t' {
			end++
		}
		if n == 0 {
			return line[:end]
		}
		n--
		line = line[end:]
	}
}

// parseUint parses digits of base 10 or 16, without allocating as
// strconv would for a []byte; ok is false for anything else or overflow.
func parseUint(b []byte, base int) (v uint64, ok bool) {
	if len(b) == 0 || len(b) > 16 {
		return 0, false
	}
	for _, c := range b {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case base == 16 && 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case base == 16 && 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		v = v*uint64(base) + uint64(d)
	}
	return v, true
}

// readAll reads f from its start into buf, whatever f's offset.
func readAll(f *os.File, buf []byte) []byte {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := f.ReadAt(buf[len(buf):cap(buf)], int64(len(buf)))
		buf = buf[:len(buf)+n]
		if err != nil || n == 0 {
			return buf
		}
	}
}

// holders maps socket inodes to the pids holding them open.
func (g *sockGuard) holders() map[uint64][]int {
	holders := map[uint64][]int{}
	ents, err := os.ReadDir(g.proc)
	if err != nil {
		return holders
	}
	prefix := []byte("socket:[")
	buf := make([]byte, 64)
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == g.self {
			continue
		}
		dir := filepath.Join(g.proc, e.Name(), "fd")
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue // gone, or a kernel thread
		}
		for _, fd := range fds {
			n, err := unix.Readlink(filepath.Join(dir, fd.Name()), buf)
			if err != nil || !bytes.HasPrefix(buf[:n], prefix) || buf[n-1] != ']' {
				continue
			}
			ino, err := strconv.ParseUint(string(buf[len(prefix):n-1]), 10, 64)
			if err != nil {
				continue
			}
			if l := holders[ino]; len(l) == 0 || l[len(l)-1] != pid {
				holders[ino] = append(l, pid)
			}
		}
	}
	return holders
}
