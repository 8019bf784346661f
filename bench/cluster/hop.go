package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
	"github.com/hutch-sandbox/hutch/internal/envdapi"
	"github.com/hutch-sandbox/hutch/sdk"
)

// hopOp is one kind of round trip the routing hop is measured with.
type hopOp struct {
	key, name string
}

// hopOps are the hop table's rows, in its order.
var hopOps = []hopOp{
	{"health", "envd GET /health"},
	{"stat", "envd filesystem.Filesystem/Stat (Connect, unary)"},
	{"run", "envd process.Process/Start of /bin/true, to its end event"},
	{"api", "API GET /sandboxes/{id}"},
}

// hopResult is the routing hop's measurement: round trips to a sandbox of
// node owner sent to that node directly and through node via.
type hopResult struct {
	owner, via string
	sandbox    string
	// times[op][0] direct, [1] through via; sorted.
	times map[string][2][]time.Duration
	fails map[string]int
	first string
	err   error
}

// envdClient reaches one sandbox's envd through one node, in E2B_API_URL
// mode (the E2b-Sandbox-Id and E2b-Sandbox-Port headers route it), on
// one kept-alive connection.

// headerRT adds the routing headers and envd's access token.
type headerRT struct {
	rt        http.RoundTripper
	id, token string
}

func (h *headerRT) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.Header.Set("E2b-Sandbox-Id", h.id)
	r.Header.Set("E2b-Sandbox-Port", strconv.Itoa(sdk.EnvdPort))
	if h.token != "" {
		r.Header.Set(envdapi.HeaderAccessToken, h.token)
	}
	return h.rt.RoundTrip(r)
}

func newEnvdClient(nd *node, id, token string) *harness.EnvdTimer {
	hc := &http.Client{Transport: &headerRT{rt: newTransport(), id: id, token: token}, Timeout: time.Minute}
	return harness.NewEnvdTimer(hc, nd.url())
}

// measureHop makes one sandbox and times each hopOp on it, sent to the
// node that runs it and through another node, alternately (which goes
// first alternates too), so that both see the same machine.
func (b *bench) measureHop(ctx context.Context, c *cluster) *hopResult {
	h := &hopResult{times: map[string][2][]time.Duration{}, fails: map[string]int{}}
	if len(c.nodes) < 2 {
		h.err = fmt.Errorf("needs 2 nodes")
		return h
	}
	b.logf("routing hop: one sandbox, %d round trips of each kind each way", b.cfg.hopN)
	id, token, err := b.createSecure(ctx, c.nodes[0])
	if err != nil {
		h.err = err
		return h
	}
	h.sandbox = id
	defer b.kill(context.Background(), c.nodes[0], id)
	owner := -1
	for k, nd := range c.nodes {
		ids, _ := sandboxesOf(b.cfg.hutch, nd.data)
		if slices.Contains(ids, id) {
			owner = k
		}
	}
	if owner < 0 {
		h.err = fmt.Errorf("no node's hutch ps lists sandbox %s", id)
		return h
	}
	a, v := c.nodes[owner], c.nodes[(owner+1)%len(c.nodes)]
	h.owner, h.via = a.name, v.name
	clients := [2]*harness.EnvdTimer{newEnvdClient(a, id, token), newEnvdClient(v, id, token)}
	apiGet := func(nd *node) func(ctx context.Context) (time.Duration, error) {
		return func(ctx context.Context) (time.Duration, error) { return b.getSandbox(ctx, nd, id) }
	}
	apis := [2]func(context.Context) (time.Duration, error){apiGet(a), apiGet(v)}
	for _, op := range hopOps {
		var do [2]func(context.Context) (time.Duration, error)
		for k, e := range clients {
			switch op.key {
			case "health":
				do[k] = e.Health
			case "stat":
				do[k] = e.Stat
			case "run":
				do[k] = e.Run
			case "api":
				do[k] = apis[k]
			}
		}
		var times [2][]time.Duration
		for i := -b.cfg.hopWarmup; i < b.cfg.hopN && ctx.Err() == nil; i++ {
			for j := range 2 {
				k := (i + j) & 1 // direct first on even rounds, through the other node on odd ones
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				d, err := do[k](cctx)
				cancel()
				if err != nil {
					h.fails[op.key]++
					if h.first == "" {
						h.first = fmt.Sprintf("%s (%s): %v", op.name, [2]string{"direct", "through " + v.name}[k], err)
					}
					continue
				}
				if i >= 0 {
					times[k] = append(times[k], d)
				}
			}
		}
		slices.Sort(times[0])
		slices.Sort(times[1])
		h.times[op.key] = times
	}
	return h
}

// createSecure creates a sandbox through nd with an envd access token
// (secure: true, as the SDKs ask), for the hop's round trips.
func (b *bench) createSecure(ctx context.Context, nd *node) (id, token string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, nd.url()+"/sandboxes",
		bytes.NewReader([]byte(`{"templateID":"base","timeout":600,"secure":true}`)))
	if err != nil {
		return "", "", err
	}
	req.Header.Set("X-API-Key", b.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := nd.api.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("POST /sandboxes: %s: %.200s", resp.Status, body)
	}
	var sb struct {
		SandboxID       string `json:"sandboxID"`
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	if err := json.Unmarshal(body, &sb); err != nil {
		return "", "", fmt.Errorf("POST /sandboxes: %w", err)
	}
	return sb.SandboxID, sb.EnvdAccessToken, nil
}

// getSandbox is GET /sandboxes/{id} through nd, timed.
func (b *bench) getSandbox(ctx context.Context, nd *node, id string) (time.Duration, error) {
	return harness.TimedGet(ctx, nd.api, nd.url()+"/sandboxes/"+id, http.Header{"X-Api-Key": {b.key}}, http.StatusOK)
}
