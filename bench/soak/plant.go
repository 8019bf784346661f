package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/runtime/native"
)

// planted are the classes -plant leaves something in, for the test of
// the harness itself (test/soak): checks that cannot see a leak would
// report 0 whatever the server did.
var planted = []string{"files", "mounts", "cgroups", "processes", "veth links", "addresses", "nftables", "uid ranges"}

// plant leaves, after the run, one thing of each class in planted as a
// leaking server would, attributed to a sandbox the run killed (id), and
// returns what undoes it.
func (c *checker) plant(id string) (undo func(), err error) {
	var undos []func()
	undo = func() {
		for i := len(undos) - 1; i >= 0; i-- {
			undos[i]()
		}
	}
	fail := func(e error) (func(), error) { undo(); return func() {}, e }

	// files: a new file under DATA.
	f := filepath.Join(c.dataDir, "soak-planted")
	if err := os.WriteFile(f, []byte("planted\n"), 0o600); err != nil {
		return fail(err)
	}
	undos = append(undos, func() { os.Remove(f) })
	// mounts: a tmpfs under DATA (a new directory as well).
	mnt := filepath.Join(c.dataDir, "soak-planted-mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		return fail(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		os.Remove(mnt)
		return fail(fmt.Errorf("mount: %w", err))
	}
	undos = append(undos, func() { unix.Unmount(mnt, unix.MNT_DETACH); os.Remove(mnt) })
	// cgroups and processes: the killed sandbox's cgroup made again, in
	// the unified hierarchy, with a process in it.
	cg := "/sys/fs/cgroup/unified/hutch/" + id
	if _, err := os.Stat("/sys/fs/cgroup/unified/hutch"); err != nil {
		cg = "/sys/fs/cgroup/hutch/" + id
	}
	if err := os.Mkdir(cg, 0o755); err != nil {
		return fail(fmt.Errorf("cgroup: %w", err))
	}
	undos = append(undos, func() { os.Remove(cg) })
	sleep := exec.Command("sleep", "600")
	if err := sleep.Start(); err != nil {
		return fail(err)
	}
	undos = append(undos, func() { sleep.Process.Kill(); sleep.Wait() })
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(sleep.Process.Pid)), 0); err != nil {
		return fail(fmt.Errorf("cgroup.procs: %w", err))
	}
	// veth links and addresses: a host-side link aliased with the id and
	// addressed from the network's range, in serve's namespace.
	ns, err := netns.GetFromPid(c.servePid)
	if err != nil {
		return fail(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fail(err)
	}
	defer h.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "hvplanted", Alias: id}, PeerName: "soakplantpeer"}
	if err := h.LinkAdd(veth); err != nil {
		return fail(fmt.Errorf("veth: %w", err))
	}
	undos = append(undos, func() {
		if h, err := netlink.NewHandleAt(ns); err == nil {
			if l, err := h.LinkByName("hvplanted"); err == nil {
				h.LinkDel(l)
			}
			h.Close()
		}
	})
	l, err := h.LinkByName("hvplanted")
	if err != nil {
		return fail(err)
	}
	h.LinkSetAlias(l, id)
	last := c.prefix.Addr().As4()
	bits := c.prefix.Bits()
	// The range's last /31: sandboxes are numbered from its start.
	ip := net.IPv4(last[0], last[1], last[2], last[3]).To4()
	for i := bits; i < 31; i++ {
		ip[i/8] |= 1 << (7 - i%8)
	}
	if err := h.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(31, 32)}}); err != nil {
		return fail(fmt.Errorf("address: %w", err))
	}
	// nftables: the killed sandbox's chain made again.
	nft, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return fail(err)
	}
	tbl := &nftables.Table{Family: nftables.TableFamilyINet, Name: "hutch"}
	ch := nft.AddChain(&nftables.Chain{Name: "sbx-" + id, Table: tbl})
	if err := nft.Flush(); err != nil {
		return fail(fmt.Errorf("nftables: %w", err))
	}
	nsFd, _ := unix.Open(fmt.Sprintf("/proc/%d/ns/net", c.servePid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	undos = append(undos, func() {
		defer unix.Close(nsFd)
		if n, err := nftables.New(nftables.WithNetNSFd(nsFd)); err == nil {
			n.DelChain(ch)
			n.Flush()
		}
	})
	// uid ranges: a claim naming the killed sandbox's directory (a name
	// that is no slot number, which the runtimes skip).
	claim := filepath.Join(native.UIDRegistry, "soak-planted")
	if err := os.WriteFile(claim, []byte(filepath.Join(c.dataDir, "sandboxes", id)), 0o600); err != nil {
		return fail(err)
	}
	undos = append(undos, func() { os.Remove(claim) })
	if len(undos) == 0 {
		return fail(errors.New("nothing planted"))
	}
	return undo, nil
}
