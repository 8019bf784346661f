package sdk

import (
	"context"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/e2bapi"
)

// Sandbox states, as in [SandboxInfo.State] and [ListOptions.States].
const (
	StateRunning = "running"
	StatePaused  = "paused"
)

// ListOptions filter and page a listing. The zero value lists every
// running and paused sandbox, newest first, 100 per page.
type ListOptions struct {
	// Config says how to reach the server.
	Config Config
	// Metadata keeps sandboxes whose metadata has all these pairs.
	Metadata map[string]string
	// States keeps sandboxes in these states; empty means all.
	States []string
	// Limit is the page size, 1..100; 0 means 100.
	Limit int
	// StartedAfter keeps sandboxes started at or after it.
	StartedAfter time.Time
	// Template keeps sandboxes of this template (ID or name).
	Template string
	// Ascending lists oldest first.
	Ascending bool
	// NextToken resumes a listing where a previous page ended.
	NextToken string
}

// Paginator walks a listing page by page, as E2B's SandboxPaginator. Use
// [Paginator.All] to range over every sandbox instead.
type Paginator struct {
	c         *Client
	q         url.Values
	nextToken string
	started   bool
}

// List returns a paginator over the sandboxes that opts select.
func List(opts ListOptions) (*Paginator, error) {
	c, err := NewClient(opts.Config)
	if err != nil {
		return nil, err
	}
	return c.List(opts), nil
}

// List returns a paginator over the sandboxes that opts select;
// opts.Config is ignored. It makes no request until the first page is
// asked for.
func (c *Client) List(opts ListOptions) *Paginator {
	q := url.Values{}
	if len(opts.Metadata) > 0 {
		q.Set("metadata", e2bapi.EncodeMetadataFilter(opts.Metadata))
	}
	if len(opts.States) > 0 {
		q.Set("state", strings.Join(opts.States, ","))
	}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	if !opts.StartedAfter.IsZero() {
		q.Set("startedAfter", opts.StartedAfter.UTC().Format(time.RFC3339Nano))
	}
	if opts.Template != "" {
		q.Set("template", opts.Template)
	}
	if opts.Ascending {
		q.Set("order", "asc")
	}
	return &Paginator{c: c, q: q, nextToken: opts.NextToken}
}

// HasNext reports whether another page may follow: true before the first
// page, then whether the server announced one.
func (p *Paginator) HasNext() bool { return !p.started || p.nextToken != "" }

// NextToken is the cursor of the next page ("" after the last), to resume
// the listing later with [ListOptions.NextToken].
func (p *Paginator) NextToken() string { return p.nextToken }

// NextItems fetches the next page. After the last page it returns nil and
// no error.
func (p *Paginator) NextItems(ctx context.Context) ([]SandboxInfo, error) {
	if !p.HasNext() {
		return nil, nil
	}
	q := url.Values{}
	for k, v := range p.q {
		q[k] = v
	}
	if p.nextToken != "" {
		q.Set("nextToken", p.nextToken)
	}
	var page []e2bapi.ListedSandbox
	h, err := p.c.api(ctx, "list sandboxes", http.MethodGet, "/v2/sandboxes", q, nil, &page, http.StatusOK)
	if err != nil {
		return nil, err
	}
	p.started = true
	p.nextToken = h.Get(e2bapi.HeaderNextToken)
	out := make([]SandboxInfo, len(page))
	for i, l := range page {
		out[i] = infoOf(l)
	}
	return out, nil
}

// All ranges over every sandbox of the remaining pages, fetching them as
// needed. A failed fetch is yielded once as the error, and ends the range.
func (p *Paginator) All(ctx context.Context) iter.Seq2[SandboxInfo, error] {
	return func(yield func(SandboxInfo, error) bool) {
		for p.HasNext() {
			items, err := p.NextItems(ctx)
			if err != nil {
				yield(SandboxInfo{}, err)
				return
			}
			for _, it := range items {
				if !yield(it, nil) {
					return
				}
			}
		}
	}
}
