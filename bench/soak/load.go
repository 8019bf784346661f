package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hutch-sandbox/hutch/sdk"
)

// opTimeout bounds each operation: a hung call is a failure, not a hang.
const opTimeout = 2 * time.Minute

// load is a run's clients and what they made.
type load struct {
	cfg *config
	o   *ops
	chk *checker

	mu sync.Mutex
	// created are the sandboxes the harness made (warm-up included), by
	// id; a sandbox under DATA/sandboxes that is not one of them and not
	// listed is the warm pool's.
	created map[string]bool
	// leftovers are sandboxes whose kill failed: killed again at the end
	// (the failure counted), so that the checks judge the server.
	leftovers []string
	clientsMu sync.Mutex
	all       []*client
	made      atomic.Int64 // sandboxes the run (not the warm-up) made
}

// client is an SDK client with HTTP connections of its own.
type client struct {
	*sdk.Client
	t *http.Transport
}

func (c *client) close() { c.t.CloseIdleConnections() }

func (l *load) newClient() *client {
	t := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 16, IdleConnTimeout: 90 * time.Second,
	}
	c, err := sdk.NewClient(sdk.Config{APIKey: l.cfg.key, APIURL: l.cfg.url, SandboxURL: l.cfg.url,
		HTTPClient: &http.Client{Transport: t}, RequestTimeout: opTimeout})
	if err != nil {
		panic(err) // a URL this harness made does not parse: a bug here
	}
	cl := &client{Client: c, t: t}
	l.clientsMu.Lock()
	l.all = append(l.all, cl)
	l.clientsMu.Unlock()
	return cl
}

func bg() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), opTimeout)
}

// create makes a sandbox and records it.
func (l *load) create(o *ops, name string, c *sdk.Client, lifetime time.Duration) (*sdk.Sandbox, error) {
	var s *sdk.Sandbox
	err := o.timed(name, func() error {
		ctx, cancel := bg()
		defer cancel()
		var err error
		s, err = c.Create(ctx, sdk.CreateOptions{Timeout: lifetime, Metadata: map[string]string{"soak": l.cfg.mode}})
		return err
	})
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.created[s.ID] = true
	l.mu.Unlock()
	l.chk.saw(s.ID)
	return s, nil
}

// command runs a command that prints a word of its own (and looks a
// name up through the sandbox's resolver) and checks what it printed.
func (l *load) command(o *ops, name string, s *sdk.Sandbox, word string) error {
	cmd := "echo " + word
	if l.cfg.dns {
		cmd += "; getent hosts soak.invalid >/dev/null || :"
	}
	return o.timed(name, func() error {
		ctx, cancel := bg()
		defer cancel()
		res, err := s.Commands.Run(ctx, cmd, &sdk.RunOptions{Timeout: opTimeout})
		if err != nil {
			return fmt.Errorf("sandbox %s: %w", s.ID, err)
		}
		if res.Stdout != word+"\n" || res.ExitCode != 0 {
			return fmt.Errorf("sandbox %s: %q printed %q (exit %d, stderr %q)", s.ID, cmd, res.Stdout, res.ExitCode, res.Stderr)
		}
		return nil
	})
}

// file writes 4 KiB of random bytes to a file and reads them back.
func (l *load) file(o *ops, suffix string, s *sdk.Sandbox, word string) error {
	data := make([]byte, 4096)
	rand.Read(data)
	path := "/tmp/soak-" + word
	if err := o.timed("file write"+suffix, func() error {
		ctx, cancel := bg()
		defer cancel()
		_, err := s.Files.Write(ctx, path, data, nil)
		if err != nil {
			return fmt.Errorf("sandbox %s: %w", s.ID, err)
		}
		return nil
	}); err != nil {
		return err
	}
	return o.timed("file read"+suffix, func() error {
		ctx, cancel := bg()
		defer cancel()
		got, err := s.Files.Read(ctx, path, nil)
		if err != nil {
			return fmt.Errorf("sandbox %s: %w", s.ID, err)
		}
		if !bytes.Equal(got, data) {
			return fmt.Errorf("sandbox %s: %s read back %d bytes, not the %d written", s.ID, path, len(got), len(data))
		}
		return nil
	})
}

func (l *load) kill(o *ops, s *sdk.Sandbox) {
	err := o.timed("kill", func() error {
		ctx, cancel := bg()
		defer cancel()
		if err := s.Kill(ctx); err != nil {
			return fmt.Errorf("sandbox %s: %w", s.ID, err)
		}
		return nil
	})
	if err != nil {
		l.mu.Lock()
		l.leftovers = append(l.leftovers, s.ID)
		l.mu.Unlock()
	}
}

// cycle is one sandbox's life: create, command, file, kill.
func (l *load) cycle(ctx context.Context, c *sdk.Client, o *ops, word, suffix string) {
	s, err := l.create(o, "create"+suffix, c, 10*time.Minute)
	if err != nil {
		return
	}
	if l.command(o, "command"+suffix, s, "soak-"+word) == nil {
		l.file(o, suffix, s, word)
	}
	l.kill(o, s)
}

// churn: cfg.n sandboxes, their starts spread evenly over cfg.duration,
// at most cfg.workers at once.
func (l *load) churn(ctx context.Context) {
	jobs := make(chan int)
	go func() {
		defer close(jobs)
		start := time.Now()
		last := time.Now()
		for i := 0; i < l.cfg.n; i++ {
			at := start.Add(time.Duration(int64(l.cfg.duration) * int64(i) / int64(l.cfg.n)))
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(at)):
			}
			select {
			case <-ctx.Done():
				return
			case jobs <- i:
			}
			if time.Since(last) >= time.Minute {
				last = time.Now()
				_, n, errs := l.o.results()
				fmt.Printf("  %s: %d sandboxes started, %d operations, %d failed\n", time.Since(start).Round(time.Second), i+1, n, errs)
			}
		}
	}()
	var wg sync.WaitGroup
	for w := 0; w < l.cfg.workers; w++ {
		c := l.newClient()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				l.made.Add(1)
				l.cycle(ctx, c.Client, l.o, fmt.Sprint(i), "")
			}
		}()
	}
	wg.Wait()
}

// clients: cfg.clients clients at once for cfg.duration; every
// cfg.longEvery-th keeps a long-lived sandbox and alternates cycles with
// rounds on it, the others only cycle.
func (l *load) clients(ctx context.Context) {
	start := time.Now()
	end := start.Add(l.cfg.duration)
	var wg sync.WaitGroup
	for k := 0; k < l.cfg.clients; k++ {
		c := l.newClient()
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(int64(l.cfg.ramp) * int64(k) / int64(l.cfg.clients))):
			}
			var long *sdk.Sandbox
			defer func() {
				if long != nil {
					l.kill(l.o, long)
				}
			}()
			keepsOne := l.cfg.longEvery > 0 && k%l.cfg.longEvery == 0
			for j := 0; time.Now().Before(end) && ctx.Err() == nil; j++ {
				if !keepsOne {
					l.made.Add(1)
					l.cycle(ctx, c.Client, l.o, fmt.Sprintf("%d-%d", k, j), "")
					continue
				}
				if long == nil {
					s, err := l.create(l.o, "create", c.Client, l.cfg.duration+10*time.Minute)
					if err != nil {
						continue
					}
					l.made.Add(1)
					long = s
				}
				if j%2 == 0 {
					l.made.Add(1)
					l.cycle(ctx, c.Client, l.o, fmt.Sprintf("%d-%d", k, j), "")
					continue
				}
				for m := 0; m < l.cfg.longCmds; m++ {
					l.command(l.o, "command (long-lived)", long, fmt.Sprintf("soak-%d-%d-%d", k, j, m))
				}
				l.file(l.o, " (long-lived)", long, fmt.Sprintf("%d-%d", k, j))
			}
		}()
	}
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			_, n, errs := l.o.results()
			fmt.Printf("  %s: %d sandboxes, %d operations, %d failed\n", time.Since(start).Round(time.Second), l.made.Load(), n, errs)
		}
	}
}

// killLeftovers kills again what failed to be killed, and closes every
// client's idle connections (the server's descriptors are counted next).
func (l *load) killLeftovers(ctx context.Context) {
	l.mu.Lock()
	left := l.leftovers
	l.leftovers = nil
	l.mu.Unlock()
	c := l.newClient()
	for _, id := range left {
		cctx, cancel := bg()
		if err := c.Kill(cctx, id); err != nil && !errors.Is(err, sdk.ErrNotFound) {
			fmt.Printf("warning: kill %s again: %v\n", id, err)
		}
		cancel()
	}
	l.clientsMu.Lock()
	for _, c := range l.all {
		c.close()
	}
	l.clientsMu.Unlock()
}

// listed are the sandboxes the API lists.
func (l *load) listed(ctx context.Context) (map[string]bool, error) {
	c := l.newClient()
	defer c.close()
	p := c.List(sdk.ListOptions{States: []string{sdk.StateRunning, sdk.StatePaused}})
	ids := map[string]bool{}
	for p.HasNext() {
		cctx, cancel := bg()
		items, err := p.NextItems(cctx)
		cancel()
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			ids[it.SandboxID] = true
		}
	}
	return ids, nil
}

// live are the sandboxes that still run as far as the server says: the
// API's list, and the sandboxes under DATA that no client ever had (the
// pool's; more than the pool's size are extra, and reported).
func (l *load) live(ctx context.Context, s *snapshot) (live map[string]bool, extra []string) {
	live, err := l.listed(ctx)
	if err != nil {
		s.fail("the API's list", err)
		live = map[string]bool{}
	}
	var pool []string
	l.mu.Lock()
	for _, id := range s.sandboxDirs {
		if !l.created[id] && !live[id] {
			pool = append(pool, id)
		}
	}
	l.mu.Unlock()
	sort.Strings(pool)
	for i, id := range pool {
		if i < l.cfg.warm {
			live[id] = true
		} else {
			extra = append(extra, id)
		}
	}
	return live, extra
}

// quiet waits until the server is at rest: no sandbox listed, the pool
// full (-warm sandboxes under DATA, the pool's gauge at -warm), twice in
// a row a second apart.
func (l *load) quiet(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	calm := 0
	var why string
	for calm < 2 {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w within %s: %s", errNotQuiet, d, why)
		}
		time.Sleep(time.Second)
		ids, err := l.listed(ctx)
		dirs, _ := os.ReadDir(filepath.Join(l.cfg.dataDir, "sandboxes"))
		ready := -1
		if l.chk.metricsURL != "" {
			ready = l.chk.poolReady(ctx)
		}
		switch {
		case err != nil:
			why = err.Error()
		case len(ids) > 0:
			why = fmt.Sprintf("%d sandboxes listed", len(ids))
		case l.cfg.dataDir != "" && len(dirs) != l.cfg.warm:
			why = fmt.Sprintf("%d sandboxes under the data directory, the pool is %d", len(dirs), l.cfg.warm)
		case ready >= 0 && ready != l.cfg.warm:
			why = fmt.Sprintf("the pool has %d ready of %d", ready, l.cfg.warm)
		default:
			calm++
			continue
		}
		calm = 0
	}
	return nil
}
