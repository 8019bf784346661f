package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
	"github.com/hutch-sandbox/hutch/sdk"
)

// measureGoSDK is the Go SDK's row: the same iterations as create.mjs,
// through Hutch's own Go SDK (package sdk of this checkout), in this
// process, against the `hutch serve` at url, with the key in E2B_API_KEY.
// Per iteration, timed:
//
//	sbx, err := c.Create(ctx, sdk.CreateOptions{})
//	_, err = sbx.Commands.Run(ctx, "true", nil)
//
// then sbx.Kill, not timed but inside the span of host CPU (cpu.go). As
// in create.mjs: one first iteration (the first calls of a new client: its
// own HTTP transport, no connection yet), -warmup unmeasured ones
// (failures reported, fatal only if all of these failed), -n one after the
// other, then -c at once (goroutines behind one gate), each timed from its
// own start, killed once all have finished.
func (b *bench) measureGoSDK(key, name, url string) *row {
	r := &row{key: key, name: name, createName: "Client.Create()", runName: `Commands.Run("true")`, concurrency: b.cfg.c}
	fmt.Printf("%-*s ", nameWidth, r.name)
	apiKey := os.Getenv("E2B_API_KEY")
	switch {
	case url == "":
		r.unavailable = noServer
	case apiKey == "":
		r.unavailable = "E2B_API_KEY is not set (bench/create.sh sets it)"
	}
	var c *sdk.Client
	if r.unavailable == "" {
		// Both URLs at the one listener, as create.mjs is given them (the
		// SDK would also route sandbox traffic to APIURL by itself, unless
		// a domain were set in the environment).
		var err error
		if c, err = sdk.NewClient(sdk.Config{APIKey: apiKey, APIURL: url, SandboxURL: url}); err != nil {
			r.unavailable = harness.OneLine(err.Error())
		}
	}
	if r.unavailable != "" {
		fmt.Println("unavailable:", r.unavailable)
		return r
	}
	// Not the harness's context: on Ctrl-C an iteration in flight
	// finishes and its sandbox is killed; the loops stop after it.
	ctx, cancel := context.WithTimeout(context.Background(), sdkTimeout)
	defer cancel()

	// one creates a sandbox and runs `true` in it; the sandbox is returned
	// for killing, also when the command failed.
	one := func() (iteration, *sdk.Sandbox, error) {
		t0 := time.Now()
		sbx, err := c.Create(ctx, sdk.CreateOptions{})
		if err != nil {
			return iteration{}, nil, err
		}
		t1 := time.Now()
		if _, err := sbx.Commands.Run(ctx, "true", nil); err != nil {
			return iteration{}, sbx, err
		}
		t2 := time.Now()
		return iteration{total: t2.Sub(t0), create: t1.Sub(t0), run: t2.Sub(t1)}, sbx, nil
	}
	// kill removes a sandbox (not timed); a failure is noted in the row.
	kill := func(sbx *sdk.Sandbox) {
		if sbx == nil {
			return
		}
		if err := sbx.Kill(ctx); err != nil {
			b.mu.Lock()
			defer b.mu.Unlock()
			r.removeFailed++
			if r.removeErr == "" {
				r.removeErr = harness.OneLine(err.Error())
			}
		}
	}

	// The first iteration, then the warm-up.
	if !r.warmUp(b.ctx, b.cfg.warmup, func(int) (iteration, error) {
		it, sbx, err := one()
		kill(sbx)
		return it, err
	}) {
		return r
	}

	// Host CPU (cpu.go): this process is the client; the kills are in
	// the spans.
	m0 := markCPU()
	i0, t0, _ := harness.CPUSample()
	r.seq.busy = -1
	iters := 0
	for i := 0; i < b.cfg.n && b.ctx.Err() == nil; i++ {
		iters++
		it, sbx, err := one()
		kill(sbx)
		if err != nil {
			r.seq.fail(harness.OneLine(err.Error()))
		} else {
			r.seq.add(it)
		}
		if (i+1)%max(1, b.cfg.n/10) == 0 {
			fmt.Print(".")
		}
	}
	if i1, t1, err := harness.CPUSample(); err == nil && t1 > t0 {
		r.seq.busy = 1 - float64(i1-i0)/float64(t1-t0)
	}
	m1 := markCPU()
	r.seq.setHostCPU(hostCPU(m0, m1, iters))
	r.seq.sort()

	if b.cfg.c > 0 && len(r.seq.total) > 0 && b.ctx.Err() == nil {
		n := b.cfg.c
		type result struct {
			it  iteration
			sbx *sdk.Sandbox
			err error
		}
		results := make([]result, n)
		gate := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				it, sbx, err := one()
				results[i] = result{it, sbx, err}
			}()
		}
		start := time.Now()
		close(gate)
		wg.Wait()
		r.conc.wall = time.Since(start)
		for _, res := range results {
			if res.err != nil {
				r.conc.fail(harness.OneLine(res.err.Error()))
				continue
			}
			r.conc.add(res.it)
		}
		r.conc.sort()
		fmt.Print(".")
		// Kill them all at once, as create.mjs does (not timed).
		for _, res := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				kill(res.sbx)
			}()
		}
		wg.Wait()
		r.conc.setHostCPU(hostCPU(m1, markCPU(), n))
	}
	if len(r.seq.total) == 0 {
		r.unavailable = "every run failed: " + r.seq.firstErr
		fmt.Println(" unavailable:", r.unavailable)
		return r
	}
	printProgressResult(b.cfg, r)
	return r
}

// waitWarmPool waits, before a row against the warm server, until its pool
// is full again, and 2 s more: what bench/create.sh does before anything
// is measured. A row before (the other SDK's warm row) drained the pool;
// its refills start sandboxes in the background, and a row measured while
// they run would find fewer warm sandboxes and a busier machine than the
// first warm row did. Warm sandboxes are in `hutch ps` of the server's data
// directory from their start (claimed ones too, but every row kills its
// sandboxes before it returns); the 2 s are for the last ones' envd.
func (b *bench) waitWarmPool() {
	if b.cfg.warmData == "" || b.cfg.warm <= 0 {
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	for b.ctx.Err() == nil {
		cmd := exec.Command(b.cfg.hutch, "ps", "-q")
		cmd.Env = append(os.Environ(), "HUTCH_DATA_DIR="+b.cfg.warmData)
		out, err := cmd.Output()
		if err != nil {
			fmt.Printf("warning: cannot count the warm pool (%s ps -q): %v\n", b.cfg.hutch, err)
			return
		}
		n := len(strings.Fields(string(out)))
		if n >= b.cfg.warm {
			break
		}
		if time.Now().After(deadline) {
			fmt.Printf("warning: the warm pool has %d of %d sandboxes after 30 s; measuring anyway\n", n, b.cfg.warm)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	select {
	case <-b.ctx.Done():
	case <-time.After(2 * time.Second):
	}
}
