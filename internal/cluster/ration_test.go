package cluster

import (
	"context"
	"fmt"
	"testing"
)

func TestRation(t *testing.T) {
	r := newRation(missRate)
	a := WithClient(context.Background(), "10.0.0.1")
	spent := 0
	for r.allow(a) {
		spent++
	}
	if spent != perClientRate {
		t.Fatalf("one client made %d lookups at once, want its share, %d", spent, perClientRate)
	}
	// Another client is not held back by the first one's flood.
	if !r.allow(WithClient(context.Background(), "10.0.0.2")) {
		t.Fatal("a second client was refused its first lookup")
	}
	// Many clients together stop at the node's ration.
	total := spent + 1
	for i := 3; i < 100; i++ {
		c := WithClient(context.Background(), fmt.Sprintf("10.0.0.%d", i))
		for r.allow(c) {
			total++
		}
	}
	if total != missRate {
		t.Fatalf("many clients made %d lookups at once, want the node's ration, %d", total, missRate)
	}
}

// TestRationPastClientsKept: clients past the ones a ration remembers
// share one share, not one each (review 26: each got a fresh, unlimited
// one).
func TestRationPastClientsKept(t *testing.T) {
	r := newRation(1 << 30)
	for i := range clientsKept {
		if !r.allow(WithClient(context.Background(), fmt.Sprintf("c%d", i))) {
			t.Fatalf("client %d refused its first lookup", i)
		}
	}
	allowed := 0
	for i := range 10 * perClientRate {
		if r.allow(WithClient(context.Background(), fmt.Sprintf("new%d", i))) {
			allowed++
		}
	}
	if allowed != perClientRate {
		t.Fatalf("%d new clients past the ones kept made %d lookups, want one share, %d", 10*perClientRate, allowed, perClientRate)
	}
}
