package osbexecd

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestShares: a tenant holds at most a quarter of a bound; other tenants
// still get the rest; a request that cannot have its share in time is
// told so (429), and what is released can be taken again.
func TestShares(t *testing.T) {
	ctx := context.Background()
	s := newShares(4)
	if err := s.acquire(ctx, "a", 1); err != nil {
		t.Fatalf("a's share: %v", err)
	}
	if err := s.acquire(ctx, "a", 1); !errors.Is(err, errBusy) {
		t.Fatalf("a's second share of 4: %v, want busy at once", err)
	}
	for _, tenant := range []string{"b", "d", "e"} {
		if err := s.acquire(ctx, tenant, 1); err != nil {
			t.Fatalf("%s's share while a holds its quarter: %v", tenant, err)
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
	// A request for more than a tenant's quarter takes the quarter.
	big := newShares(100)
	if err := big.acquire(ctx, "a", 1000); err != nil {
		t.Fatal(err)
	}
	if err := big.acquire(ctx, "b", 25); err != nil {
		t.Fatalf("b after a's oversized request: %v", err)
	}
}
