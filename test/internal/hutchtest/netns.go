package hutchtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// NetNS is a network namespace of a test's own, with its loopback up:
// a place for a server that must have a port (443) or an address of its
// own. It is closed when the test ends.
type NetNS struct {
	h netns.NsHandle
}

// NewNetNS makes a network namespace for t.
func NewNetNS(t testing.TB) *NetNS {
	t.Helper()
	errc := make(chan error, 1)
	var h netns.NsHandle
	go func() {
		runtime.LockOSThread() // the thread ends up in the new namespace: never unlocked
		var err error
		h, err = netns.New()
		errc <- err
	}()
	if err := <-errc; err != nil {
		t.Fatalf("new network namespace: %v", err)
	}
	n := &NetNS{h: h}
	t.Cleanup(func() { h.Close() })
	err := n.Do(func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	})
	if err != nil {
		t.Fatalf("loopback up: %v", err)
	}
	return n
}

// NetNSOf is a namespace the caller made (and closes), as a NetNS.
func NetNSOf(h netns.NsHandle) *NetNS { return &NetNS{h: h} }

// Do runs f on a thread in the namespace. The thread is left there and
// dies with its goroutine: it never goes back to the pool in the wrong
// namespace.
func (n *NetNS) Do(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(n.h); err != nil {
			errc <- fmt.Errorf("setns: %w", err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// DialContext dials from inside the namespace.
func (n *NetNS) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := n.Do(func() error {
		var err error
		c, err = (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Path names the namespace for nsenter --net.
func (n *NetNS) Path() string { return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), int(n.h)) }

// Wrap is the argv prefix that runs a command inside the namespace.
func (n *NetNS) Wrap() []string { return []string{"nsenter", "--net=" + n.Path(), "--"} }

// Command is exec.Command of name and args, run inside the namespace.
func (n *NetNS) Command(name string, args ...string) *exec.Cmd {
	argv := append(n.Wrap(), append([]string{name}, args...)...)
	return exec.Command(argv[0], argv[1:]...)
}
