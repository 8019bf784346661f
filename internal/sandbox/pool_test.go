package sandbox

import (
	"context"
	"testing"
	"time"
)

// TestRefillWait: a refill yields to creates that start sandboxes on
// demand, and waits out the quiet period after a hand-out only while the
// pool is at least half full.
func TestRefillWait(t *testing.T) {
	// recent stands for "now", read when each case runs: one read once
	// for all could be past the quiet period by a later case on a loaded
	// host.
	const recent = -1
	tests := []struct {
		name     string
		cold     int32
		size     int
		idle     int32
		lastTake int64
		proceeds bool
	}{
		{"empty pool, nothing else", 0, 4, 0, 0, true},
		{"empty pool, a cold create", 1, 4, 0, 0, false},
		{"half full, just handed out", 0, 4, 2, recent, false},
		{"below half, just handed out", 0, 4, 1, recent, true},
		{"full, handed out long ago", 0, 4, 3, 1, true},
		{"below half, cold creates", 2, 4, 1, recent, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := &Manager{}
			m.cold.Store(tc.cold)
			p := &pool{size: tc.size}
			p.idle.Store(tc.idle)
			if tc.lastTake == recent {
				tc.lastTake = time.Now().UnixNano()
			}
			p.lastTake.Store(tc.lastTake)
			// Well under refillQuiet: a refill that waits has not proceeded.
			ctx, cancel := context.WithTimeout(context.Background(), refillQuiet/3)
			defer cancel()
			if got := m.refillWait(ctx, p); got != tc.proceeds {
				t.Errorf("refillWait = %v, want %v", got, tc.proceeds)
			}
		})
	}
}
