package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	_ "modernc.org/sqlite" // the server's database, read only

	"github.com/hutch-sandbox/hutch/internal/runtime/native"
)

// The leak checks: what a sandbox leaves on the host while it lives, each
// looked at from outside the server, before the run and after it, when
// every sandbox the run made is killed. A thing that belongs to one
// sandbox (its cgroup, its link, its chain, its files) is attributed to
// the sandbox by the id in its name or path and is a leak when that
// sandbox is not one of those still running (the warm pool's, and the
// API's list); a thing that names no sandbox (a mount, a file) is a leak
// when it was not there before. The server's descriptors and goroutines
// are counted: more after than before is a leak, with the same sandboxes
// running (the pool) and no client connected.

// Leak is one class's count of things left behind.
type Leak struct {
	Class string `json:"class"`
	// Where says what was looked at.
	Where string `json:"where"`
	Count int    `json:"count"`
	// Items names the first few.
	Items []string `json:"items,omitempty"`
}

// classes, in the order they are reported.
var classes = []struct{ name, where string }{
	{"sandboxes", "DATA/sandboxes/<id> of sandboxes neither listed by the API nor in the warm pool"},
	{"database records", "rows of the sandboxes table (DATA/hutch.db) not listed by the API"},
	{"processes", "processes in a cgroup hutch/<id> of a sandbox this run made and killed"},
	{"mounts", "mount points under DATA in the host's, the harness's and serve's mount namespaces"},
	{"loop devices", "loop devices backed by a file under DATA"},
	{"cgroups", "/sys/fs/cgroup/*/hutch/<id> and /sys/fs/cgroup/hutch/<id> of sandboxes this run killed"},
	{"veth links", "host-side links hv* in serve's network namespace"},
	{"addresses", "addresses of the network's range on links of serve's network namespace"},
	{"nftables", "chains cap-<id>/sbx-<id>, sets res-<id>, elements of the dispatch/caps/proxied maps in table inet hutch"},
	{"conntrack entries", "flows to or from the network's range in serve's network namespace"},
	{"uid ranges", native.UIDRegistry + " claims and holds of sandboxes under DATA"},
	{"files", "files and directories under DATA (but the database and its WAL)"},
	{"serve fds", "entries of /proc/<serve>/fd, after − before (the database's pool apart: ≤ 8 connections)"},
	{"serve goroutines", "go_goroutines of serve's --metrics-listen, after − before"},
}

// checker takes the snapshots of one server.
type checker struct {
	dataDir    string
	servePid   int
	metricsURL string
	prefix     netip.Prefix
	hc         *http.Client

	mu sync.Mutex
	// known are the ids of sandboxes of this server ever seen: made by the
	// run, or found under DATA/sandboxes. Host-wide things (cgroups,
	// processes) are attributed to this server only by them: other
	// servers run on the same host.
	known map[string]bool
}

func newChecker(dataDir string, servePid int, metricsURL string, prefix netip.Prefix) *checker {
	return &checker{dataDir: filepath.Clean(dataDir), servePid: servePid, metricsURL: metricsURL, prefix: prefix,
		hc:    &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second},
		known: map[string]bool{}}
}

// saw records a sandbox id as this server's.
func (c *checker) saw(id string) {
	if id == "" {
		return
	}
	c.mu.Lock()
	c.known[id] = true
	c.mu.Unlock()
}

func (c *checker) isKnown(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.known[id]
}

// sample records the sandboxes under DATA/sandboxes as this server's.
func (c *checker) sample() {
	ents, _ := os.ReadDir(filepath.Join(c.dataDir, "sandboxes"))
	for _, e := range ents {
		c.saw(e.Name())
	}
}

// sampleEvery samples until ctx ends: a sandbox the run never saw (a warm
// pool's, handed to nobody) is still known by its cgroup's name.
func (c *checker) sampleEvery(ctx context.Context, d time.Duration) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		c.sample()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// link is a link of serve's network namespace.
type link struct {
	name, alias string
	addrs       []netip.Addr
}

type snapshot struct {
	sandboxDirs []string
	dbRows      []string
	procs       map[int]string // pid → sandbox id of its cgroup
	mounts      []string
	loops       []string
	cgroups     []string
	links       []link
	nftChains   []string
	nftSets     []string
	nftElems    map[string][]string // map/set name → keys (link names)
	flows       [][]netip.Addr      // each flow's addresses
	uidClaims   map[string]string   // registry file → owner directory
	files       map[string]bool
	fds         int
	fdKinds     map[string]int // what serve's fds are, by kind
	dbConns     int            // serve's connections to its database
	goroutines  int
	errs        []string // what could not be looked at
}

func (s *snapshot) fail(what string, err error) {
	s.errs = append(s.errs, fmt.Sprintf("%s: %v", what, err))
}

// take looks at everything once.
func (c *checker) take(ctx context.Context) *snapshot {
	c.sample()
	s := &snapshot{procs: map[int]string{}, nftElems: map[string][]string{}, uidClaims: map[string]string{}, files: map[string]bool{}}
	ents, err := os.ReadDir(filepath.Join(c.dataDir, "sandboxes"))
	if err != nil {
		s.fail("sandboxes", err)
	}
	for _, e := range ents {
		s.sandboxDirs = append(s.sandboxDirs, e.Name())
	}
	if s.dbRows, err = c.dbRows(ctx); err != nil {
		s.fail("database", err)
	}
	c.processes(s)
	c.mounts(s)
	c.loops(s)
	c.cgroups(s)
	if err := c.netns(s); err != nil {
		s.fail("network namespace", err)
	}
	c.uids(s)
	c.walk(s)
	if c.servePid > 0 {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", c.servePid))
		if err != nil {
			s.fail("serve fds", err)
		}
		s.fdKinds = map[string]int{}
		for _, fd := range fds {
			target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", c.servePid, fd.Name()))
			if err != nil {
				continue
			}
			// The database's connections are a pool kept by design
			// (internal/store: at most maxConns, 8, never given back, each
			// with the database and its WAL open): it grows to its cap
			// under concurrency and stays. Counted apart, against the cap.
			if rel, _ := filepath.Rel(c.dataDir, target); dbFiles[rel] {
				if rel == "hutch.db" {
					s.dbConns++
				}
				continue
			}
			s.fds++
			s.fdKinds[fdKind(target)]++
		}
	}
	if c.metricsURL != "" {
		if s.goroutines, err = c.goroutines(ctx); err != nil {
			s.fail("serve goroutines", err)
		}
	}
	return s
}

func (c *checker) dbRows(ctx context.Context) ([]string, error) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(c.dataDir, "hutch.db")+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SELECT id FROM sandboxes")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// cgroupID is the sandbox id in a /proc/<pid>/cgroup line's path
// ".../hutch/<id>[/...]", or "".
func cgroupID(path string) string {
	parts := strings.Split(path, "/")
	for i := 0; i+1 < len(parts); i++ {
		if parts[i] == "hutch" {
			return parts[i+1]
		}
	}
	return ""
}

func (c *checker) processes(s *snapshot) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		s.fail("processes", err)
		return
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.SplitN(line, ":", 3)
			if len(f) == 3 {
				if id := cgroupID(f[2]); id != "" && c.isKnown(id) {
					s.procs[pid] = id
					break
				}
			}
		}
	}
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(p string) string {
	if !strings.Contains(p, `\`) {
		return p
	}
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '\\' && i+4 <= len(p) {
			if v, err := strconv.ParseUint(p[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

func (c *checker) under(p string) bool {
	return p == c.dataDir || strings.HasPrefix(p, c.dataDir+"/")
}

func (c *checker) mounts(s *snapshot) {
	pids := []string{"self", "1"}
	if c.servePid > 0 {
		pids = append(pids, strconv.Itoa(c.servePid))
	}
	seen := map[string]bool{}
	for _, pid := range pids {
		ns, err := os.Readlink("/proc/" + pid + "/ns/mnt")
		if err != nil || seen[ns] {
			continue
		}
		seen[ns] = true
		f, err := os.Open("/proc/" + pid + "/mountinfo")
		if err != nil {
			s.fail("mounts", err)
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 5 {
				continue
			}
			if mp := unescapeMount(fields[4]); c.under(mp) {
				s.mounts = append(s.mounts, ns+" "+mp)
			}
		}
		f.Close()
	}
}

func (c *checker) loops(s *snapshot) {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if p := strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)"); c.under(p) {
			s.loops = append(s.loops, filepath.Base(filepath.Dir(filepath.Dir(f)))+" "+p)
		}
	}
}

func (c *checker) cgroups(s *snapshot) {
	for _, pat := range []string{"/sys/fs/cgroup/*/hutch/*", "/sys/fs/cgroup/hutch/*"} {
		dirs, _ := filepath.Glob(pat)
		for _, d := range dirs {
			if fi, err := os.Stat(d); err == nil && fi.IsDir() && c.isKnown(filepath.Base(d)) {
				s.cgroups = append(s.cgroups, d)
			}
		}
	}
}

// netns looks at serve's network namespace: links, addresses, the
// firewall and conntrack.
func (c *checker) netns(s *snapshot) error {
	var ns netns.NsHandle
	var err error
	if c.servePid > 0 {
		ns, err = netns.GetFromPid(c.servePid)
	} else {
		ns, err = netns.Get()
	}
	if err != nil {
		return err
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return fmt.Errorf("links: %w", err)
	}
	for _, l := range links {
		a := l.Attrs()
		lk := link{name: a.Name, alias: a.Alias}
		addrs, _ := h.AddrList(l, netlink.FAMILY_V4)
		for _, ad := range addrs {
			if ip, ok := netip.AddrFromSlice(ad.IP.To4()); ok && c.prefix.Contains(ip) {
				lk.addrs = append(lk.addrs, ip)
			}
		}
		s.links = append(s.links, lk)
	}
	flows, err := h.ConntrackTableList(netlink.ConntrackTable, netlink.FAMILY_V4)
	if err != nil {
		s.fail("conntrack", err)
	}
	for _, f := range flows {
		var in []netip.Addr
		for _, ip := range []net.IP{f.Forward.SrcIP, f.Forward.DstIP, f.Reverse.SrcIP, f.Reverse.DstIP} {
			if a, ok := netip.AddrFromSlice(ip.To4()); ok && c.prefix.Contains(a) {
				in = append(in, a)
			}
		}
		if len(in) > 0 {
			s.flows = append(s.flows, in)
		}
	}
	nft, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		s.fail("nftables", err)
		return nil
	}
	tbl, err := nft.ListTableOfFamily("hutch", nftables.TableFamilyINet)
	if err != nil || tbl == nil {
		return nil // no firewall (yet): nothing in it
	}
	chains, err := nft.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		s.fail("nftables chains", err)
	}
	for _, ch := range chains {
		if ch.Table != nil && ch.Table.Name == "hutch" {
			s.nftChains = append(s.nftChains, ch.Name)
		}
	}
	sets, err := nft.GetSets(tbl)
	if err != nil {
		s.fail("nftables sets", err)
	}
	for _, set := range sets {
		switch set.Name {
		case "dispatch", "caps", "proxied":
			elems, err := nft.GetSetElements(set)
			if err != nil {
				s.fail("nftables set "+set.Name, err)
				continue
			}
			for _, e := range elems {
				s.nftElems[set.Name] = append(s.nftElems[set.Name], string(bytes.TrimRight(e.Key, "\x00")))
			}
		default:
			s.nftSets = append(s.nftSets, set.Name)
		}
	}
	return nil
}

func (c *checker) uids(s *snapshot) {
	ents, err := os.ReadDir(native.UIDRegistry)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.fail("uid ranges", err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(native.UIDRegistry, e.Name()))
		if err != nil {
			continue
		}
		if owner := string(b); c.under(owner) {
			s.uidClaims[e.Name()] = owner
		}
	}
}

// storeMaxConns is internal/store's maxConns: the most connections its
// pool keeps open.
const storeMaxConns = 8

// dbFiles are the database's: they grow with the run by design.
var dbFiles = map[string]bool{"hutch.db": true, "hutch.db-wal": true, "hutch.db-shm": true}

func (c *checker) walk(s *snapshot) {
	filepath.WalkDir(c.dataDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed meanwhile
			}
			s.fail("files", err)
			return nil
		}
		rel, _ := filepath.Rel(c.dataDir, p)
		if rel == "." || dbFiles[rel] {
			return nil
		}
		s.files[rel] = true
		return nil
	})
}

func (c *checker) goroutines(ctx context.Context) (int, error) {
	return c.metric(ctx, "go_goroutines ")
}

// poolReady is the base pool's ready sandboxes, or -1 when unknown.
func (c *checker) poolReady(ctx context.Context) int {
	n, err := c.metric(ctx, `hutch_pool_ready_sandboxes{template="base"} `)
	if err != nil {
		return -1
	}
	return n
}

// metric is the value of the metrics line that starts with prefix.
func (c *checker) metric(ctx context.Context, prefix string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", c.metricsURL, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(f), err
		}
	}
	return 0, errors.New("no " + strings.TrimSpace(prefix) + " in " + c.metricsURL)
}

// fdKind is what an fd's link names, without the inode of sockets,
// pipes and anonymous inodes, and with a path's sandbox ids elided.
func fdKind(target string) string {
	if i := strings.Index(target, ":["); i > 0 && !strings.HasPrefix(target, "/") {
		return target[:i]
	}
	if strings.HasPrefix(target, "anon_inode:") {
		return target
	}
	return target
}

// idOf is the known sandbox id a path names (a component, or a
// component's name before its first dot: sockets/<id>.sock), or "".
func (c *checker) idOf(p string) string {
	for _, part := range strings.Split(p, "/") {
		base, _, _ := strings.Cut(part, ".")
		if base != "" && c.isKnown(base) {
			return base
		}
	}
	return ""
}

// idIn is the sandbox id at the end of an nftables name such as
// "cap-<id>", "sbx-<id>", "res-<id>", or "".
func idIn(name string) string {
	for _, p := range []string{"cap-", "sbx-", "res-"} {
		if id, ok := strings.CutPrefix(name, p); ok {
			return id
		}
	}
	return ""
}

// leaks counts what after holds that no running sandbox explains: live
// are the sandboxes that still run (the API's and the pool's).
func (c *checker) leaks(before, after *snapshot, live map[string]bool, extraSandboxes []string) []Leak {
	found := map[string][]string{}
	add := func(class, item string) { found[class] = append(found[class], item) }
	beforeSet := func(items []string) map[string]bool {
		m := map[string]bool{}
		for _, i := range items {
			m[i] = true
		}
		return m
	}

	for _, id := range after.sandboxDirs {
		if !live[id] {
			add("sandboxes", id)
		}
	}
	for _, id := range extraSandboxes {
		add("sandboxes", id+" (running, in no list: more than the warm pool)")
	}
	for _, id := range after.dbRows {
		if !live[id] {
			add("database records", id)
		}
	}
	pids := make([]int, 0, len(after.procs))
	for pid := range after.procs {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	for _, pid := range pids {
		if id := after.procs[pid]; !live[id] {
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			add("processes", fmt.Sprintf("%d %s (sandbox %s)", pid, strings.TrimSpace(string(comm)), id))
		}
	}
	// Things named by a path: a leak when the path names a sandbox that is
	// not running, or names none and is new.
	byPath := func(class string, beforeItems, afterItems []string) {
		old := beforeSet(beforeItems)
		for _, it := range afterItems {
			if id := c.idOf(it); id != "" {
				if !live[id] {
					add(class, it)
				}
			} else if !old[it] {
				add(class, it)
			}
		}
	}
	byPath("mounts", before.mounts, after.mounts)
	byPath("loop devices", before.loops, after.loops)
	for _, cg := range after.cgroups {
		if !live[filepath.Base(cg)] {
			add("cgroups", cg)
		}
	}
	liveLinks := map[string]bool{}
	liveAddrs := map[netip.Addr]bool{}
	for _, l := range after.links {
		if strings.HasPrefix(l.name, "hv") && live[l.alias] {
			liveLinks[l.name] = true
			for _, a := range l.addrs {
				// The host's end and the sandbox's (a /31).
				liveAddrs[a] = true
				liveAddrs[a.Next()] = true
			}
		}
	}
	for _, l := range after.links {
		if strings.HasPrefix(l.name, "hv") && !liveLinks[l.name] {
			add("veth links", fmt.Sprintf("%s (alias %q)", l.name, l.alias))
		}
		if !liveLinks[l.name] {
			for _, a := range l.addrs {
				add("addresses", fmt.Sprintf("%s on %s", a, l.name))
			}
		}
	}
	for _, ch := range after.nftChains {
		if id := idIn(ch); id != "" && !live[id] {
			add("nftables", "chain "+ch)
		}
	}
	for _, set := range after.nftSets {
		if id := idIn(set); id != "" && !live[id] {
			add("nftables", "set "+set)
		}
	}
	for name, keys := range after.nftElems {
		for _, k := range keys {
			if !liveLinks[k] {
				add("nftables", fmt.Sprintf("element %q of %s", k, name))
			}
		}
	}
	for _, f := range after.flows {
		for _, a := range f {
			if !liveAddrs[a] {
				add("conntrack entries", fmt.Sprintf("flow of %v", f))
				break
			}
		}
	}
	claims := make([]string, 0, len(after.uidClaims))
	for f := range after.uidClaims {
		claims = append(claims, f)
	}
	sort.Strings(claims)
	for _, f := range claims {
		owner := after.uidClaims[f]
		if !live[filepath.Base(owner)] {
			add("uid ranges", f+" → "+owner)
		}
	}
	var files []string
	for f := range after.files {
		files = append(files, f)
	}
	sort.Strings(files)
	var oldFiles []string
	for f := range before.files {
		oldFiles = append(oldFiles, f)
	}
	byPath("files", oldFiles, files)
	if d := after.fds - before.fds; d > 0 {
		var kinds []string
		for k, n := range after.fdKinds {
			if n > before.fdKinds[k] {
				kinds = append(kinds, fmt.Sprintf("%s %d → %d", k, before.fdKinds[k], n))
			}
		}
		sort.Strings(kinds)
		for i := 0; i < d; i++ {
			add("serve fds", fmt.Sprintf("%d before, %d after: %s", before.fds, after.fds, strings.Join(kinds, ", ")))
		}
	}
	if after.dbConns > storeMaxConns {
		for i := storeMaxConns; i < after.dbConns; i++ {
			add("serve fds", fmt.Sprintf("%d connections to the database, more than its pool's %d", after.dbConns, storeMaxConns))
		}
	}
	if d := after.goroutines - before.goroutines; d > 0 {
		for i := 0; i < d; i++ {
			add("serve goroutines", fmt.Sprintf("%d before, %d after", before.goroutines, after.goroutines))
		}
	}

	var out []Leak
	for _, cl := range classes {
		items := found[cl.name]
		l := Leak{Class: cl.name, Where: cl.where, Count: len(items)}
		if len(items) > 10 {
			items = items[:10]
		}
		l.Items = dedupe(items)
		out = append(out, l)
	}
	return out
}

func dedupe(items []string) []string {
	var out []string
	for i, it := range items {
		if i == 0 || it != items[i-1] {
			out = append(out, it)
		}
	}
	return out
}

// total is the sum of the counts.
func total(ls []Leak) int {
	n := 0
	for _, l := range ls {
		n += l.Count
	}
	return n
}
