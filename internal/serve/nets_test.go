package serve

import "testing"

func TestProxyCaps(t *testing.T) {
	for _, tc := range []struct{ nofile, flows, total, each int }{
		{20000, 1024, 2500, 312}, // these machines
		{1 << 20, 1024, 131072, 1024},
		{1 << 20, 100, 131072, 100}, // never past the sandbox's flow cap
		{2000, 1024, 250, 64},
		{256, 1024, 64, 64},
	} {
		total, each := proxyCaps(tc.nofile, tc.flows)
		if total != tc.total || each != tc.each {
			t.Errorf("proxyCaps(%d, %d) = %d, %d; want %d, %d", tc.nofile, tc.flows, total, each, tc.total, tc.each)
		}
	}
}
