package network

import (
	"container/list"
	"net/netip"
	"time"

	"github.com/hutch-sandbox/hutch/internal/network/policy"
)

// maxResolved bounds the addresses open to a sandbox because its allowed
// names resolved to them: the elements of its res-<id> set, and what the
// manager remembers of them (an address, its expiry and the names that
// gave it, up to maxNamesPerAddr). The answers come from name servers the sandbox's user does
// not control (allowOut "*.example.com" trusts example.com's): without a
// bound, answers of 70 addresses for an hour, for every name under the
// zone, held 1.6 million elements and 112 MiB more of the kernel's
// memory after 30 s of lookups from one socket (review R6).
//
// When a new answer's addresses do not fit, those added longest ago make
// room, a quarter of maxResolved at once (or more if the answer needs
// it), deleted from the set in the batch that adds the new ones. So the
// name looked up last always connects, and what a sandbox loses are
// addresses it was given thousands of addresses ago. Evicting the
// soonest to expire instead would keep what came with the longest TTLs,
// which the answers' servers choose. A quarter at once because every
// batch that deletes elements takes about 25 ms to commit (an RCU grace
// period), during which the other sandboxes' batches wait: evicting for
// every answer made the lookups of allowed names of every other sandbox
// 10 times slower (1 ms to 10 ms) while one sandbox went on past its
// bound.
const maxResolved = 4096

// resolvedSetSize is the size the kernel's res-<id> sets are created
// with, defence in depth: should the manager's count ever be wrong, the
// kernel refuses elements past it (the batch that adds them fails). Twice
// maxResolved, since the kernel counts expired elements until its garbage
// collection (every second) removes them.
const resolvedSetSize = 2 * maxResolved

// maxNamesPerAddr bounds the names remembered for one address (those
// whose answers held it, with their expiries), for policy updates: an
// update keeps an address while one of its names is still allowed, and
// names often share addresses (a CDN's). Past it, the name that expires
// first is forgotten. The manager's memory for a sandbox's resolved
// addresses is at most maxResolved × maxNamesPerAddr names, 5 MiB should
// every one be a different name of 253 bytes.
const maxNamesPerAddr = 4

// evictTimeout is the timeout an evicted address is written with, just
// before it is deleted in the same batch: see resolvedSet.add.
const evictTimeout = time.Second

// A resolvedSet is what the manager knows of one sandbox's res-<id> set:
// each address, until when the set holds it, and the names whose answers
// held it, oldest added first. At most max addresses. Not safe for
// concurrent use.
type resolvedSet struct {
	max   int
	addrs map[netip.Addr]*list.Element // of *resolvedAddr
	order list.List                    // of *resolvedAddr, least recently added first
	// soonest is no later than the earliest expiry: before it, nothing
	// has expired and there is nothing to forget.
	soonest time.Time
}

// A resolvedAddr is one element of the set.
type resolvedAddr struct {
	addr  netip.Addr
	until time.Time // the latest of its names'
	names []addrName
}

// An addrName is a name whose answer held an address, until when.
type addrName struct {
	name  string
	until time.Time
}

// addName records that name's answer held r until until.
func (r *resolvedAddr) addName(name string, until, now time.Time) {
	if until.After(r.until) {
		r.until = until
	}
	names := r.names[:0]
	for _, n := range r.names {
		if n.name == name {
			until = latest(until, n.until)
		} else if now.Before(n.until) {
			names = append(names, n)
		}
	}
	if len(names) >= maxNamesPerAddr {
		first := 0
		for i, n := range names {
			if n.until.Before(names[first].until) {
				first = i
			}
		}
		names = append(names[:first], names[first+1:]...)
	}
	r.names = append(names, addrName{name, until})
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func newResolvedSet(max int) *resolvedSet {
	return &resolvedSet{max: max, addrs: map[netip.Addr]*list.Element{}}
}

// len returns how many addresses s holds, expired ones not yet forgotten
// included; never more than its max.
func (s *resolvedSet) len() int { return len(s.addrs) }

// has reports whether a is open at now.
func (s *resolvedSet) has(a netip.Addr, now time.Time) bool {
	e, ok := s.addrs[a]
	return ok && now.Before(e.Value.(*resolvedAddr).until)
}

// forgetExpired drops the addresses expired at now: the kernel has
// dropped them too.
func (s *resolvedSet) forgetExpired(now time.Time) {
	if now.Before(s.soonest) {
		return
	}
	var soonest time.Time
	for e := s.order.Front(); e != nil; {
		next := e.Next()
		r := e.Value.(*resolvedAddr)
		if !now.Before(r.until) {
			s.order.Remove(e)
			delete(s.addrs, r.addr)
		} else if soonest.IsZero() || r.until.Before(soonest) {
			soonest = r.until
		}
		e = next
	}
	s.soonest = soonest
}

// A resolvedWrite is an element to write to the kernel's set: the address
// and how long it is to stay.
type resolvedWrite struct {
	addr    netip.Addr
	timeout time.Duration
}

// add records that name resolved to addrs (IPv4) at now, valid until
// until, and returns what the kernel's set must be told, in one batch:
// the elements to write, and the addresses evicted to make room, to
// delete. Only the first max of addrs are taken.
//
// An address already held counts as just added, and is written with the
// later of its two expiries: recent kernels (6.18 here) give an element
// the timeout of its last write, and a short answer for another name
// must not close it early. Older ones never change a timeout once
// written, so the manager's expiry is the kernel's or later.
//
// The kernel fails a batch that deletes an element it does not hold, an
// expired one included, and its expiries may be earlier than the
// manager's. So each evicted address is written (evictTimeout) just
// before it is deleted: written, it is there to delete, whatever its
// state was.
func (s *resolvedSet) add(name string, addrs []netip.Addr, until, now time.Time) (writes []resolvedWrite, evicted []netip.Addr) {
	s.forgetExpired(now)
	if len(addrs) > s.max {
		addrs = addrs[:s.max]
	}
	// The addresses held first, so that none of this answer's is evicted
	// for another of it.
	var fresh []netip.Addr
	held := 0
	seen := make(map[netip.Addr]bool, len(addrs))
	for _, a := range addrs {
		if seen[a] {
			continue
		}
		seen[a] = true
		e, ok := s.addrs[a]
		if !ok {
			fresh = append(fresh, a)
			continue
		}
		r := e.Value.(*resolvedAddr)
		r.addName(name, until, now)
		s.order.MoveToBack(e)
		held++
		writes = append(writes, resolvedWrite{a, r.until.Sub(now)})
	}
	if over := len(s.addrs) + len(fresh) - s.max; over > 0 {
		// A quarter at once: see maxResolved. Never one of this answer's,
		// at the back.
		n := min(max(over, s.max/4), len(s.addrs)-held)
		for range n {
			old := s.order.Remove(s.order.Front()).(*resolvedAddr)
			delete(s.addrs, old.addr)
			evicted = append(evicted, old.addr)
		}
	}
	for _, a := range fresh {
		s.addrs[a] = s.order.PushBack(&resolvedAddr{addr: a, until: until, names: []addrName{{name, until}}})
		writes = append(writes, resolvedWrite{a, until.Sub(now)})
	}
	if len(fresh) > 0 && (s.soonest.IsZero() || until.Before(s.soonest)) {
		s.soonest = until
	}
	return writes, evicted
}

// kept returns a copy of s with the addresses that names p allows held
// at now, each until the latest of those names' expiries, in the same
// order, for a policy update: connections to allowed names must survive
// it.
func (s *resolvedSet) kept(p *policy.Egress, now time.Time) *resolvedSet {
	k := newResolvedSet(s.max)
	for e := s.order.Front(); e != nil; e = e.Next() {
		r := e.Value.(*resolvedAddr)
		kr := &resolvedAddr{addr: r.addr}
		for _, n := range r.names {
			if now.Before(n.until) && p.Name(n.name) == policy.Allow {
				kr.names = append(kr.names, n)
				kr.until = latest(kr.until, n.until)
			}
		}
		if len(kr.names) > 0 {
			k.addrs[kr.addr] = k.order.PushBack(kr)
			if k.soonest.IsZero() || kr.until.Before(k.soonest) {
				k.soonest = kr.until
			}
		}
	}
	return k
}

// writes returns every address of s valid at now, to write into an empty
// set.
func (s *resolvedSet) writes(now time.Time) []resolvedWrite {
	var w []resolvedWrite
	for e := s.order.Front(); e != nil; e = e.Next() {
		if r := e.Value.(*resolvedAddr); now.Before(r.until) {
			w = append(w, resolvedWrite{r.addr, r.until.Sub(now)})
		}
	}
	return w
}
