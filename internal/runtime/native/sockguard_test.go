package native

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// fakeProc lays out a procfs with the given /proc/self/net files and
// processes' descriptors (pid -> link targets).
func fakeProc(t *testing.T, net map[string]string, fds map[string][]string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "self/net"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range net {
		if err := os.WriteFile(filepath.Join(dir, "self/net", name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for pid, links := range fds {
		fdDir := filepath.Join(dir, pid, "fd")
		if err := os.MkdirAll(fdDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, l := range links {
			if err := os.Symlink(l, filepath.Join(fdDir, string(rune('0'+i)))); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

const (
	netlinkText = `sk               Eth Pid        Groups   Rmem     Wmem     Dump  Locks    Drops    Inode
00000000d6ab6bdd 0   0          00000000 0        0        0     2        0        4
0000000088a8a4c9 0   1234       00000000 1048576  0        0     2        0        1589
000000003bf3f90e 0   1235       00000000 4096     0        0     2        0        1591
`
	icmpText = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  12: 00000000:0002 00000000:0000 07 00000000:00010000 00:00000000 00000000  1000        0 2001 2 0000000000000000 0
  13: 00000000:0003 00000000:0000 07 00000100:00000000 00:00000000 00000000  1000        0 2002 2 0000000000000000 0
`
	packetText = `sk               RefCnt Type Proto  Iface R Rmem   User   Inode
0000000000000000 3      3    0003   1     1 2048   0      3001
`
)

func TestSockGuardQueues(t *testing.T) {
	proc := fakeProc(t, map[string]string{"netlink": netlinkText, "icmp": icmpText, "packet": packetText}, nil)
	g := &sockGuard{proc: proc}
	queues := map[uint64]int64{}
	total := g.queues(queues)
	// Only receive queues count: the ICMP socket with a send queue alone
	// (2002) holds nothing the guard cares about.
	want := map[uint64]int64{1589: 1 << 20, 1591: 4096, 2001: 0x10000, 3001: 2048}
	if !maps.Equal(queues, want) {
		t.Errorf("queues %v, want %v", queues, want)
	}
	if total != 1<<20+4096+0x10000+2048 {
		t.Errorf("total %d", total)
	}
	// The poll the init makes four times a second allocates nothing: Go's
	// runtime would collect the garbage with threads a fork bomb may leave
	// it no pid to start.
	if n := testing.AllocsPerRun(100, func() { g.queues(nil) }); n != 0 {
		t.Errorf("a poll allocates %v times", n)
	}
	if got := g.queues(nil); got != total {
		t.Errorf("total without queues %d, want %d", got, total)
	}
}

func TestSockGuardHolders(t *testing.T) {
	proc := fakeProc(t, nil, map[string][]string{
		"1":  {"socket:[1589]"}, // the init itself
		"7":  {"/dev/null", "socket:[1589]", "socket:[1589]", "pipe:[12]"},
		"9":  {"socket:[1591]", "socket:[1589]"},
		"10": {"anon_inode:[eventfd]", "socket:[x]", "socket:["},
	})
	os.MkdirAll(filepath.Join(proc, "self"), 0o755) // not a pid
	got := (&sockGuard{proc: proc, self: 1}).holders()
	want := map[uint64][]int{1589: {7, 9}, 1591: {9}}
	if len(got) != len(want) {
		t.Fatalf("holders %v, want %v", got, want)
	}
	for ino, pids := range want {
		g := slices.Clone(got[ino])
		slices.Sort(g)
		if !slices.Equal(g, pids) {
			t.Errorf("holders of %d: %v, want %v", ino, g, pids)
		}
	}
}

func TestSockBudget(t *testing.T) {
	for _, tc := range []struct{ memory, want int64 }{
		{0, 0}, {-1, 0}, {8 << 20, 4 << 20}, {64 << 20, 16 << 20}, {512 << 20, 128 << 20},
	} {
		if got := sockBudget(tc.memory); got != tc.want {
			t.Errorf("sockBudget(%d) = %d, want %d", tc.memory, got, tc.want)
		}
	}
}

// BenchmarkSockGuardPoll is what an idle sandbox's init pays each poll.
func BenchmarkSockGuardPoll(b *testing.B) {
	g := &sockGuard{proc: "/proc", self: 1}
	for b.Loop() {
		g.queues(nil)
	}
}

// TestSockGuardCountsFirst: the socket tables are read only when the
// namespace has sockets of an uncharged protocol at all.
func TestSockGuardCountsFirst(t *testing.T) {
	const heading = "protocol  size sockets  memory press maxhdr  slab module     cl co di ac io in de sh ss gs se re bi br ha uh gp em\n"
	row := func(name string, n int) string {
		return name + "    1096  " + strconv.Itoa(n) + "      -1   NI       0   no   kernel      n  n  n  n  n  n  n  n  n  n  n  n  n  n  n  n  n  n\n"
	}
	idle := heading + row("UNIX", 12) + row("TCP", 3) + row("NETLINK", 0) + row("PING", 0) + row("RAW", 0) + row("PACKET", 0)
	tests := []struct {
		name      string
		protocols string // "" for no such file
		want      bool
	}{
		{"idle", idle, false},
		{"a netlink socket", heading + row("NETLINK", 1) + row("PING", 0), true},
		{"a ping socket", heading + row("NETLINK", 0) + row("PINGv6", 2), true},
		{"a packet socket", idle + row("PACKET", 1), true},
		{"unreadable count", heading + row("NETLINK", -1), true},
		{"no protocols file", "", true},
		{"empty protocols file", "\n", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			net := map[string]string{"netlink": netlinkText}
			if tc.protocols != "" {
				net["protocols"] = tc.protocols
			}
			g := &sockGuard{proc: fakeProc(t, net, nil), budget: 1}
			if got := g.anyUncharged(); got != tc.want {
				t.Errorf("anyUncharged = %v, want %v", got, tc.want)
			}
			if n := testing.AllocsPerRun(100, func() { g.anyUncharged() }); n != 0 {
				t.Errorf("a count allocates %v times", n)
			}
		})
	}
}
