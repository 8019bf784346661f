package connlimit

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

func TestRequestsCapsInFlight(t *testing.T) {
	for _, tc := range []struct {
		name             string
		perClient, total int
		clients          []string // one request each, those admitted held in flight
		wantServed       int
	}{
		{"per client", 2, 0, []string{"10.0.0.1:1", "10.0.0.1:2", "10.0.0.1:3", "10.0.0.2:1"}, 3},
		{"total", 0, 3, []string{"10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1", "10.0.0.4:1"}, 3},
		{"an IPv6 /64 is one client", 1, 0, []string{"[2001:db8::1]:1", "[2001:db8::2]:1", "[2001:db8:0:1::1]:1"}, 2},
		{"no caps", 0, 0, []string{"10.0.0.1:1", "10.0.0.1:2", "10.0.0.1:3"}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewRequests(tc.perClient, tc.total)
			release := make(chan struct{})
			var arrived sync.WaitGroup // at either handler
			var served, refused atomic.Int32
			h := l.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				served.Add(1)
				arrived.Done()
				<-release
			}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				refused.Add(1)
				arrived.Done()
				w.WriteHeader(http.StatusServiceUnavailable)
			}))
			var done sync.WaitGroup
			for _, addr := range tc.clients {
				r := httptest.NewRequest("GET", "/", nil)
				r.RemoteAddr = addr
				arrived.Add(1)
				done.Add(1)
				go func() { defer done.Done(); h.ServeHTTP(httptest.NewRecorder(), r) }()
			}
			arrived.Wait()
			if int(served.Load()) != tc.wantServed || int(refused.Load()) != len(tc.clients)-tc.wantServed {
				t.Errorf("served %d, refused %d; want %d served", served.Load(), refused.Load(), tc.wantServed)
			}
			close(release)
			done.Wait()
			if got := l.InFlight(); got != 0 {
				t.Errorf("%d requests still counted after all ended", got)
			}
			// Room again once they ended.
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tc.clients[0]
			arrived.Add(1)
			h.ServeHTTP(httptest.NewRecorder(), r)
			if int(served.Load()) != tc.wantServed+1 {
				t.Error("a request after the others ended was refused")
			}
		})
	}
}
