package osbexecd

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestShares: a tenant holds at most half of a bound; another tenant
// still gets the rest; a request that cannot have its share in time is
// told so (429), and what is released can be taken again.
func TestShares(t *testing.T) {
	ctx := context.Background()
	s := newShares(4)
	for i := range 2 {
		if err := s.acquire(ctx, "a", 1); err != nil {
			t.Fatalf("a's share %d: %v", i+1, err)
		}
	}
	if err := s.acquire(ctx, "a", 1); !errors.Is(err, errBusy) {
		t.Fatalf("a's third share of 4: %v, want busy at once", err)
	}
	for i := range 2 {
		if err := s.acquire(ctx, "b", 1); err != nil {
			t.Fatalf("b's share %d while a holds half: %v", i+1, err)
		}
	}
	// All four are held: a third tenant waits, then is told busy.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := s.acquire(short, "c", 1); err == nil {
		t.Fatal("c got a share while all were held")
	}
	if s.held["c"] != 0 {
		t.Fatalf("c's failed wait left %d held", s.held["c"])
	}
	s.release("a", 1)
	if err := s.acquire(ctx, "c", 1); err != nil {
		t.Fatalf("c after a released one: %v", err)
	}
	// A request for more than a tenant's half takes the half.
	big := newShares(100)
	if err := big.acquire(ctx, "a", 1000); err != nil {
		t.Fatal(err)
	}
	if err := big.acquire(ctx, "b", 50); err != nil {
		t.Fatalf("b after a's oversized request: %v", err)
	}
}
