package osbexecd

import (
	"context"
	"net/http"
)

// ServeSandbox is Serve with the sandbox's envd given by its parts: the
// shape internal/server's Execd takes, so that the server needs no type of
// this package.
func (h *Handler) ServeSandbox(w http.ResponseWriter, r *http.Request, id, tenant string, transport http.RoundTripper, token string,
	metrics func(context.Context) (cpus, cpuPct, memTotalMiB, memUsedMiB float64, ok bool)) {
	e := Envd{Transport: transport, Token: token, Tenant: tenant}
	if metrics != nil {
		e.Metrics = func(ctx context.Context) (Metrics, bool) {
			c, p, t, u, ok := metrics(ctx)
			return Metrics{CPUCount: c, CPUUsedPct: p, MemTotalMiB: t, MemUsedMiB: u}, ok
		}
	}
	h.Serve(w, r, id, e)
}
