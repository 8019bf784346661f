package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// TestConcurrent: writers and a reader at once (run with -race to see it
// matter); every write is kept whole.
func TestConcurrent(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				b.Write([]byte("ab"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := b.String(); len(got) != 1600 || strings.Count(got, "ab") != 800 {
		t.Errorf("got %d bytes, %d pairs", len(got), strings.Count(got, "ab"))
	}
}
