package native

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// Each sandbox maps its ids 0-65535 to a range of host ids of its own,
// slot n starting at uidBase + n*uidRange. Two sandboxes sharing a range
// would share everything the kernel counts per host uid (inotify
// instances, user namespaces, processes, message queues) and could signal
// each other's processes, so ranges are claimed host-wide, whatever data
// dir a sandbox lives in: one file per slot in UIDRegistry, created with
// O_EXCL and naming the sandbox's directory.
//
// A claim whose sandbox directory is gone (a data dir deleted without
// removing its sandboxes) is taken back when no free slot is left. Ranges
// that /etc/subuid or /etc/subgid give to someone (rootless containers,
// Docker's userns-remap, LXD) are never used, and neither is anything from
// 0x70000000 up: systemd keeps that for its "foreign" ids and warns
// against ids of 2^31 and more, which some tools read as negative.
const (
	// uidBase is the first host uid handed to sandboxes, above the ids
	// distributions give to users and systemd to dynamic users.
	uidBase = 1 << 20
	// uidRange is how many ids each sandbox maps: 0..65535 inside.
	uidRange = 65536
	// uidCeiling is where sandboxes' ranges stop.
	uidCeiling = 0x70000000
	// maxSlots is how many ranges fit below uidCeiling.
	maxSlots = (uidCeiling - uidBase) / uidRange
)

// UIDRegistry is the host-wide directory of claimed uid ranges. It lives
// in /run: no sandbox outlives a reboot's processes, and a fresh boot
// starts with no claims.
const UIDRegistry = "/run/hutch/uid-ranges"

// subIDFiles list id ranges given to users, which sandboxes stay clear of.
var subIDFiles = []string{"/etc/subuid", "/etc/subgid"}

// claimSlot reserves a free uid range for sandbox id host-wide.
func (rt *Runtime) claimSlot(id string) (int, error) { return rt.claimSlotFor(rt.sandboxDir(id)) }

// claimSlotFor reserves a free uid range for the sandbox whose directory
// is owner (its state.json records the slot as "uidSlot").
func (rt *Runtime) claimSlotFor(owner string) (int, error) {
	if err := os.MkdirAll(rt.uidRegistry, 0o700); err != nil {
		return 0, fmt.Errorf("uid range registry: %w", err)
	}
	taken, err := subIDRanges(rt.subIDFiles)
	if err != nil {
		return 0, err
	}
	for sweep := false; ; sweep = true {
		used := map[int]bool{}
		ents, err := os.ReadDir(rt.uidRegistry)
		if err != nil {
			return 0, fmt.Errorf("uid range registry: %w", err)
		}
		for _, e := range ents {
			// "<slot>" is a claim, "<slot>.<x>" a hold on it (HoldIDs).
			num, _, _ := strings.Cut(e.Name(), ".")
			n, err := strconv.Atoi(num)
			if err != nil {
				continue
			}
			if sweep && rt.staleClaim(e.Name(), n) {
				os.Remove(filepath.Join(rt.uidRegistry, e.Name()))
				continue
			}
			used[n] = true
		}
		for slot := 0; slot < maxSlots; slot++ {
			if used[slot] || overlaps(taken, uidBase+slot*uidRange) {
				continue
			}
			f, err := os.OpenFile(filepath.Join(rt.uidRegistry, strconv.Itoa(slot)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if errors.Is(err, os.ErrExist) {
				continue
			}
			if err != nil {
				return 0, fmt.Errorf("claim uid range: %w", err)
			}
			_, err = f.WriteString(owner)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				os.Remove(f.Name())
				return 0, fmt.Errorf("claim uid range: %w", err)
			}
			return slot, nil
		}
		if sweep {
			return 0, fmt.Errorf("no free uid range for a new sandbox (%d in use on this host): %w", len(used), errdefs.ErrUnavailable)
		}
	}
}

// unclaimedSlot is a first record's slot: its sandbox has claimed none
// yet (Create writes the record first).
const unclaimedSlot = -1

// staleClaim reports whether slot's claim belongs to no sandbox: its
// sandbox directory is gone, or that sandbox's record names another slot.
// A directory without a record yet is a sandbox being made: not stale.
func (rt *Runtime) staleClaim(file string, slot int) bool {
	b, err := os.ReadFile(filepath.Join(rt.uidRegistry, file))
	if err != nil || len(b) == 0 || !filepath.IsAbs(string(b)) {
		return err == nil // unreadable: leave it; empty or garbage: stale
	}
	dir := string(b)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return true
	}
	st, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return false
	}
	var r struct {
		Slot int `json:"uidSlot"`
	}
	if json.Unmarshal(st, &r) != nil || r.Slot == unclaimedSlot {
		return false // a first record: the sandbox is claiming it now
	}
	return r.Slot != slot
}

// releaseSlot gives back sandbox id's range, if the claim is still its own.
func (rt *Runtime) releaseSlot(slot int, id string) { rt.releaseSlotOf(slot, rt.sandboxDir(id)) }

// releaseSlotOf gives back a range claimed for owner, if it is still its.
func (rt *Runtime) releaseSlotOf(slot int, owner string) {
	for _, p := range []string{filepath.Join(rt.uidRegistry, strconv.Itoa(slot)), rt.holdFile(slot, owner)} {
		if b, err := os.ReadFile(p); err == nil && string(b) == owner {
			os.Remove(p)
		}
	}
}

// holdFile is where owner's hold on slot is recorded.
func (rt *Runtime) holdFile(slot int, owner string) string {
	h := fnv.New64a()
	h.Write([]byte(owner))
	return filepath.Join(rt.uidRegistry, fmt.Sprintf("%d.%016x", slot, h.Sum64()))
}

// HoldIDs keeps a range claimed for as long as dir (whose state.json
// records the slot as "uidSlot") exists, beside its first claim: a
// checkpoint, and each sandbox restored from it, run on the ids of the
// sandbox that was saved (runsc restores only under the same mapping),
// and the range must not go to another sandbox while any of them is
// left. ReleaseIDs(r, dir) ends the hold.
func (rt *Runtime) HoldIDs(r IDRange, dir string) error {
	if err := os.MkdirAll(rt.uidRegistry, 0o700); err != nil {
		return fmt.Errorf("uid range registry: %w", err)
	}
	if err := os.WriteFile(rt.holdFile(r.Slot, dir), []byte(dir), 0o600); err != nil {
		return fmt.Errorf("hold uid range: %w", err)
	}
	return nil
}

// IDRange is a range of host uids and gids claimed for one sandbox of
// another backend (gVisor): the same host-wide registry serves both, so
// no two sandboxes share ids whatever runs them.
type IDRange struct {
	// Slot is recorded in the sandbox's state.json as "uidSlot", which
	// tells a live claim from a stale one.
	Slot int
	// HostID is the host id the sandbox's 0 maps to; Size ids follow it.
	HostID, Size int
}

// ClaimIDs reserves a free range for the sandbox whose state lives in dir
// (an absolute path whose state.json records the slot as "uidSlot").
func (rt *Runtime) ClaimIDs(dir string) (IDRange, error) {
	slot, err := rt.claimSlotFor(dir)
	if err != nil {
		return IDRange{}, err
	}
	return IDRange{Slot: slot, HostID: uidBase + slot*uidRange, Size: uidRange}, nil
}

// ReleaseIDs gives back a range ClaimIDs returned for dir.
func (rt *Runtime) ReleaseIDs(r IDRange, dir string) { rt.releaseSlotOf(r.Slot, dir) }

// idRange is a range of host ids [start, start+count).
type idRange struct{ start, count int }

// subIDRanges reads the "name:start:count" lines of files that exist.
func subIDRanges(files []string) ([]idRange, error) {
	var out []idRange
	for _, name := range files {
		f, err := os.Open(name)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			parts := strings.Split(strings.TrimSpace(sc.Text()), ":")
			if len(parts) != 3 || strings.HasPrefix(parts[0], "#") {
				continue
			}
			start, err1 := strconv.Atoi(parts[1])
			count, err2 := strconv.Atoi(parts[2])
			if err1 == nil && err2 == nil && count > 0 {
				out = append(out, idRange{start, count})
			}
		}
		f.Close()
	}
	return out, nil
}

// overlaps reports whether the sandbox range starting at base meets any of rs.
func overlaps(rs []idRange, base int) bool {
	for _, r := range rs {
		if base < r.start+r.count && r.start < base+uidRange {
			return true
		}
	}
	return false
}

// adoptLegacyClaims moves the uid range claims an older Hutch kept in the
// data dir (DataDir/uids/<slot>, holding the sandbox id) into the
// host-wide registry, for the sandboxes that still exist, so that a new
// sandbox never takes a range a sandbox made before the upgrade still uses.
func (rt *Runtime) adoptLegacyClaims() {
	legacy := filepath.Join(rt.dataDir, "uids")
	ents, err := os.ReadDir(legacy)
	if err != nil {
		return
	}
	if err := os.MkdirAll(rt.uidRegistry, 0o700); err != nil {
		return
	}
	for _, e := range ents {
		p := filepath.Join(legacy, e.Name())
		slot, err := strconv.Atoi(e.Name())
		b, rerr := os.ReadFile(p)
		if err != nil || rerr != nil {
			continue
		}
		if dir := rt.sandboxDir(string(b)); validID(string(b)) && exists(dir) {
			f, err := os.OpenFile(filepath.Join(rt.uidRegistry, strconv.Itoa(slot)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				continue // claimed in the registry already (by whom is not ours to judge)
			}
			f.WriteString(dir)
			f.Close()
		}
		os.Remove(p)
	}
	os.Remove(legacy) // only when empty
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }
