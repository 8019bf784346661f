package sdk

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/hutch-sandbox/hutch/internal/e2bapi"
)

// SnapshotInfo is a snapshot: a sandbox's files at one moment, kept as a
// template. Create sandboxes from it with CreateOptions.Template set to
// its ID or one of its Names.
type SnapshotInfo struct {
	// ID identifies the snapshot (it is a template build id).
	ID string `json:"snapshotID"`
	// Names are its "name:tag" refs.
	Names []string `json:"names"`
}

// SnapshotOptions say how a snapshot is taken.
type SnapshotOptions struct {
	// Name names the snapshot; "" lets the server pick one. A name given
	// to an earlier snapshot of the same key moves to the new one.
	Name string
	// TTL, when set, has the server remove the snapshot that long after
	// it was taken (Hutch's own; E2B has no retention).
	TTL time.Duration
}

// CreateSnapshot snapshots the sandbox's files (see Client.CreateSnapshot).
func (s *Sandbox) CreateSnapshot(ctx context.Context, opts SnapshotOptions) (SnapshotInfo, error) {
	return s.client.CreateSnapshot(ctx, s.ID, opts)
}

// CreateSnapshot snapshots the files of sandbox id: it is frozen while they
// are captured, then runs on. ErrNotFound when there is no such sandbox.
func (c *Client) CreateSnapshot(ctx context.Context, id string, opts SnapshotOptions) (SnapshotInfo, error) {
	var req e2bapi.SnapshotRequest
	if opts.Name != "" {
		req.Name = &opts.Name
	}
	if opts.TTL > 0 {
		ttl := int64(opts.TTL.Round(time.Second) / time.Second)
		req.TTL = &ttl
	}
	var out SnapshotInfo
	_, err := c.api(ctx, "snapshot sandbox "+id, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/snapshots", nil, req, &out, http.StatusCreated)
	return out, err
}

// ListSnapshotsOptions filter and page ListSnapshots.
type ListSnapshotsOptions struct {
	// SandboxID keeps the snapshots of one sandbox; Name those of one name.
	SandboxID, Name string
	// Limit is the page size (1-100); 0 is the server's default.
	Limit int
	// NextToken continues a listing from the token a page returned.
	NextToken string
}

// ListSnapshots returns a page of the key's snapshots, newest first, and the
// token of the next page ("" after the last).
func (c *Client) ListSnapshots(ctx context.Context, opts ListSnapshotsOptions) ([]SnapshotInfo, string, error) {
	q := url.Values{}
	for k, v := range map[string]string{"sandboxID": opts.SandboxID, "name": opts.Name, "nextToken": opts.NextToken} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	var out []SnapshotInfo
	h, err := c.api(ctx, "list snapshots", http.MethodGet, "/snapshots", q, nil, &out, http.StatusOK)
	if err != nil {
		return nil, "", err
	}
	return out, h.Get(e2bapi.HeaderNextToken), nil
}

// DeleteSnapshot deletes snapshot id; false when there is no such snapshot.
// Sandboxes made from it keep their files.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) (bool, error) {
	_, err := c.api(ctx, "delete snapshot "+id, http.MethodDelete, "/templates/"+url.PathEscape(id), nil, nil, nil, http.StatusNoContent)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// ForkOptions say how many forks to make and for how long.
type ForkOptions struct {
	// Count is the number of forks, 1 to 100; 0 means 1.
	Count int
	// Timeout is each fork's lifetime; 0 means the server's default.
	Timeout time.Duration
}

// ForkResult is one fork: its sandbox, or the error that kept it from
// being made.
type ForkResult struct {
	Sandbox *Sandbox
	Err     error
}

// Fork forks the sandbox (see Client.Fork).
func (s *Sandbox) Fork(ctx context.Context, opts ForkOptions) ([]ForkResult, error) {
	return s.client.Fork(ctx, s.ID, opts)
}

// Fork makes opts.Count new sandboxes from the files of sandbox id, which
// is frozen while they are captured (once) and then runs on, its id and
// expiry untouched. Each fork succeeds or fails on its own.
func (c *Client) Fork(ctx context.Context, id string, opts ForkOptions) ([]ForkResult, error) {
	var req e2bapi.ForkRequest
	if opts.Count != 0 {
		req.Count = &opts.Count
	}
	if opts.Timeout != 0 {
		t := seconds(opts.Timeout)
		req.Timeout = &t
	}
	var out []e2bapi.ForkResult
	op := "fork sandbox " + id
	if _, err := c.api(ctx, op, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/fork", nil, req, &out, http.StatusCreated); err != nil {
		return nil, err
	}
	res := make([]ForkResult, len(out))
	for i, r := range out {
		switch {
		case r.Sandbox != nil:
			res[i].Sandbox = c.newSandbox(*r.Sandbox)
		case r.Error != nil:
			res[i].Err = &Error{Op: op, Kind: kindOfStatus(r.Error.Code), StatusCode: r.Error.Code, Message: r.Error.Message}
		default:
			res[i].Err = &Error{Op: op, Kind: ErrUnavailable, Message: "the server reported neither a sandbox nor an error"}
		}
	}
	return res, nil
}
