package osbexecd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/hutch-sandbox/hutch/internal/envdapi"
)

// ping is GET /ping: 200 once the sandbox's envd serves, which is what
// the SDKs poll for after creating a sandbox.
func (h *Handler) ping(w http.ResponseWriter, r *http.Request, c *call) {
	if err := h.client(c, "").health(r.Context()); err != nil {
		fail(w, err)
		return
	}
	okEmpty(w)
}

// metricsBody is execd's Metrics.
type metricsBody struct {
	CPUCount    float64 `json:"cpu_count"`
	CPUUsedPct  float64 `json:"cpu_used_pct"`
	MemTotalMiB float64 `json:"mem_total_mib"`
	MemUsedMiB  float64 `json:"mem_used_mib"`
	Timestamp   int64   `json:"timestamp"`
}

// envdMetrics is the part of envd's GET /metrics this package reads.
type envdMetrics struct {
	CPUCount   float64 `json:"cpu_count"`
	CPUUsedPct float64 `json:"cpu_used_pct"`
	MemTotal   float64 `json:"mem_total"`
	MemUsed    float64 `json:"mem_used"`
}

// readMetrics asks envd for the sandbox's metrics. Memory is in bytes
// there; execd's MiB are fractional.
func (h *Handler) readMetrics(ctx context.Context, c *call) (*metricsBody, error) {
	if c.envd.Metrics != nil {
		if m, ok := c.envd.Metrics(ctx); ok {
			return &metricsBody{CPUCount: m.CPUCount, CPUUsedPct: m.CPUUsedPct, MemTotalMiB: m.MemTotalMiB,
				MemUsedMiB: m.MemUsedMiB, Timestamp: timestamp()}, nil
		}
	}
	ec := h.client(c, "")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, envdBase+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	if c.envd.Token != "" {
		req.Header.Set(envdapi.HeaderAccessToken, c.envd.Token)
	}
	resp, err := ec.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("envd did not answer GET /metrics: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, filesError("metrics", resp)
	}
	defer resp.Body.Close()
	var m envdMetrics
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&m); err != nil {
		return nil, fmt.Errorf("envd's metrics: %w", err)
	}
	return &metricsBody{
		CPUCount:    m.CPUCount,
		CPUUsedPct:  m.CPUUsedPct,
		MemTotalMiB: m.MemTotal / (1 << 20),
		MemUsedMiB:  m.MemUsed / (1 << 20),
		Timestamp:   timestamp(),
	}, nil
}

// metrics is GET /metrics.
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request, c *call) {
	m, err := h.readMetrics(r.Context(), c)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, m)
}

// watchMetrics is GET /metrics/watch: a Metrics event every
// MetricsInterval until the client goes away or envd stops answering.
func (h *Handler) watchMetrics(w http.ResponseWriter, r *http.Request, c *call) {
	ctx := r.Context()
	m, err := h.readMetrics(ctx, c)
	if err != nil {
		fail(w, err)
		return
	}
	s := startSSE(w)
	t := time.NewTicker(h.opts.MetricsInterval)
	defer t.Stop()
	for {
		b, _ := json.Marshal(m) // plain numbers: cannot fail
		_ = s.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := w.Write(append(append([]byte("data: "), b...), '\n', '\n')); err != nil {
			return
		}
		if s.rc.Flush() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if m, err = h.readMetrics(ctx, c); err != nil {
			h.log.Debug("metrics watch ended", "sandbox", c.id, "err", err)
			return
		}
	}
}
