package envd

import (
	"net"
	"os"
	"runtime"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// TestListenerOwner: the uid that owns a loopback connection's listener,
// read from the kernel's socket tables, for IPv4 and IPv6 and for a
// listener of another uid (made with this thread's fsuid, which the kernel
// stamps on a new socket).
func TestListenerOwner(t *testing.T) {
	for _, tc := range []struct {
		network, addr string
		uid           int
		dial          string // the network dialled, if not network
	}{
		{"tcp4", "127.0.0.1:0", os.Geteuid(), ""},
		{"tcp6", "[::1]:0", os.Geteuid(), ""},
		{"tcp4", "127.0.0.1:0", 61000, ""},
		// Node's listen(port): "::", dual-stack; envd dials IPv4 first.
		{"tcp", "[::]:0", 61000, "tcp4"},
	} {
		ln := listenAs(t, tc.network, tc.addr, tc.uid)
		accepted := make(chan net.Conn, 1)
		go func() {
			// The accepted socket is stamped with the accepting thread's
			// fsuid: a listener's process accepts as its own uid.
			runtime.LockOSThread()
			if tc.uid != os.Geteuid() {
				unix.Setfsuid(tc.uid)
			}
			c, err := ln.Accept()
			if err == nil {
				accepted <- c
			}
			close(accepted)
			// The thread keeps its fsuid: it ends with this goroutine.
		}()
		dial, addr := tc.network, ln.Addr().String()
		if tc.dial != "" {
			dial, addr = tc.dial, net.JoinHostPort("127.0.0.1", strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
		}
		c, err := net.Dial(dial, addr)
		if err != nil {
			t.Skipf("%s: %v", tc.network, err)
		}
		a := <-accepted
		uid, found := listenerOwner(c)
		if !found || uid != tc.uid {
			t.Errorf("%s as %d: owner %d, found %v", tc.network, tc.uid, uid, found)
		}
		c.Close()
		if a != nil {
			a.Close()
		}
		ln.Close()
	}
}

// listenAs listens with a socket stamped with uid (root can set its
// thread's fsuid; others get their own uid).
func listenAs(t *testing.T, network, addr string, uid int) net.Listener {
	t.Helper()
	if uid != os.Geteuid() {
		if os.Geteuid() != 0 {
			t.Skip("needs root to make a socket of another uid")
		}
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		unix.Setfsuid(uid)
		defer unix.Setfsuid(0)
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Skipf("%s: %v", network, err)
	}
	return ln
}

// TestOwnerAllowed: which listener owners a Hutch-Port-Owner value
// admits: root always; the named user's uid from the sandbox's
// /etc/passwd; nobody else, and for a name the file lacks, root alone.
func TestOwnerAllowed(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(root+"/etc", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(root+"/etc/passwd", []byte("root:x:0:0::/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/bash\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := New(Options{Root: root})
	for _, tc := range []struct {
		owner string
		uid   int
		want  bool
	}{
		{"root", 0, true},
		{"root", 1000, false},
		{"user", 0, true},
		{"user", 1000, true},
		{"user", 61000, false},
		{"user", 65534, false},
		{"nosuch", 1000, false},
		{"nosuch", 0, true},
	} {
		if got := s.ownerAllowed(tc.owner, tc.uid); got != tc.want {
			t.Errorf("owner %q, listener uid %d: allowed %v, want %v", tc.owner, tc.uid, got, tc.want)
		}
	}
}
