package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/hutch-sandbox/hutch/internal/e2bapi"
)

// VolumeMount is a volume mounted into a sandbox: the volume's name and
// the absolute path where the sandbox sees it.
type VolumeMount struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

func volumeMounts(in []e2bapi.VolumeMount) []VolumeMount {
	var out []VolumeMount
	for _, v := range in {
		out = append(out, VolumeMount{Name: v.Name, Path: v.Path})
	}
	return out
}

// VolumeInfo names a volume.
type VolumeInfo struct {
	ID   string `json:"volumeID"`
	Name string `json:"name"`
}

// Volume is a directory on the server that outlives sandboxes: mount it
// with [CreateOptions].Volumes and read and write its files with the
// methods below, which authenticate with the volume's own Token (not the
// API key). Safe for concurrent use.
type Volume struct {
	ID, Name string
	// Token opens the volume's content.
	Token  string
	client *Client
}

// CreateVolume makes a volume; its name must be 1 to 64 of
// [a-zA-Z0-9_-] and not used by another of the key's volumes
// (ErrInvalidArgument; ErrConflict).
func (c *Client) CreateVolume(ctx context.Context, name string) (*Volume, error) {
	var out e2bapi.VolumeAndToken
	if _, err := c.api(ctx, "create volume "+name, http.MethodPost, "/volumes", nil, e2bapi.NewVolume{Name: name}, &out, http.StatusCreated); err != nil {
		return nil, err
	}
	return &Volume{ID: out.VolumeID, Name: out.Name, Token: out.Token, client: c}, nil
}

// GetVolume returns the volume id, token included; ErrNotFound if the key
// has none such.
func (c *Client) GetVolume(ctx context.Context, id string) (*Volume, error) {
	var out e2bapi.VolumeAndToken
	if _, err := c.api(ctx, "get volume "+id, http.MethodGet, "/volumes/"+url.PathEscape(id), nil, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return &Volume{ID: out.VolumeID, Name: out.Name, Token: out.Token, client: c}, nil
}

// ListVolumes returns the key's volumes, oldest first.
func (c *Client) ListVolumes(ctx context.Context) ([]VolumeInfo, error) {
	var out []VolumeInfo
	if _, err := c.api(ctx, "list volumes", http.MethodGet, "/volumes", nil, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return out, nil
}

// DestroyVolume removes the volume id and its files. It reports false when
// there was no such volume; a volume a sandbox mounts is refused
// (ErrConflict).
func (c *Client) DestroyVolume(ctx context.Context, id string) (bool, error) {
	_, err := c.api(ctx, "destroy volume "+id, http.MethodDelete, "/volumes/"+url.PathEscape(id), nil, nil, nil, http.StatusNoContent)
	var e *Error
	if errors.As(err, &e) && e.Kind == ErrNotFound {
		return false, nil
	}
	return err == nil, err
}

// VolumeEntry describes a file of a volume.
type VolumeEntry struct {
	Name string `json:"name"`
	// Type is "file", "directory", "symlink" or "unknown".
	Type string `json:"type"`
	// Path is from the volume's root, "/...".
	Path string `json:"path"`
	Size int64  `json:"size"`
	// Mode is the permission bits.
	Mode uint32 `json:"mode"`
	// UID and GID are as sandboxes see them.
	UID    uint32    `json:"uid"`
	GID    uint32    `json:"gid"`
	Atime  time.Time `json:"atime"`
	Mtime  time.Time `json:"mtime"`
	Ctime  time.Time `json:"ctime"`
	Target string    `json:"target,omitempty"`
}

// VolumeWriteOptions give a written file or made directory its owner and
// mode; nil fields keep the server's defaults (0, 0, 0644 or 0755).
type VolumeWriteOptions struct {
	UID, GID, Mode *uint32
	// Parents makes a directory's missing parents (MakeDir).
	Parents bool
}

func (o VolumeWriteOptions) query(q url.Values) {
	for name, v := range map[string]*uint32{"uid": o.UID, "gid": o.GID, "mode": o.Mode} {
		if v != nil {
			q.Set(name, strconv.FormatUint(uint64(*v), 10))
		}
	}
	if o.Parents {
		q.Set("force", "true")
	}
}

// content makes one volume content call with the volume's token; it
// decodes a JSON answer into out, or returns the body open when out is
// nil and the status is 200.
func (v *Volume) content(ctx context.Context, op, method, what string, q url.Values, body io.Reader, out any, ok int) (io.ReadCloser, error) {
	u := v.client.cfg.VolumeAPIURL + "/volumecontent/" + url.PathEscape(v.ID) + "/" + what + "?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, &Error{Op: op, Kind: ErrInvalidArgument, Err: err}
	}
	req.Header.Set("Authorization", "Bearer "+v.Token)
	req.Header.Set("User-Agent", userAgent)
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	resp, err := v.client.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, transportError(op, err)
	}
	if resp.StatusCode != ok {
		defer resp.Body.Close()
		return nil, httpError(op, resp)
	}
	if out == nil {
		return resp.Body, nil
	}
	defer resp.Body.Close()
	if ok == http.StatusNoContent {
		return nil, nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return nil, &Error{Op: op, Message: "malformed response: " + err.Error(), Err: err}
	}
	return nil, nil
}

// List describes the entries of directory path, depth levels deep (1:
// its own entries).
func (v *Volume) List(ctx context.Context, path string, depth int) ([]VolumeEntry, error) {
	q := url.Values{"path": {path}}
	if depth > 0 {
		q.Set("depth", strconv.Itoa(depth))
	}
	var out []VolumeEntry
	_, err := v.content(ctx, "list "+path, http.MethodGet, "dir", q, nil, &out, http.StatusOK)
	return out, err
}

// MakeDir makes the directory path.
func (v *Volume) MakeDir(ctx context.Context, path string, opts VolumeWriteOptions) (*VolumeEntry, error) {
	q := url.Values{"path": {path}}
	opts.query(q)
	var out VolumeEntry
	if _, err := v.content(ctx, "make directory "+path, http.MethodPost, "dir", q, nil, &out, http.StatusCreated); err != nil {
		return nil, err
	}
	return &out, nil
}

// Stat describes path (a symlink itself); ErrNotFound if there is none.
func (v *Volume) Stat(ctx context.Context, path string) (*VolumeEntry, error) {
	var out VolumeEntry
	if _, err := v.content(ctx, "stat "+path, http.MethodGet, "path", url.Values{"path": {path}}, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return &out, nil
}

// ReadFile returns the content of the regular file path; the caller
// closes it.
func (v *Volume) ReadFile(ctx context.Context, path string) (io.ReadCloser, error) {
	return v.content(ctx, "read "+path, http.MethodGet, "file", url.Values{"path": {path}}, nil, nil, http.StatusOK)
}

// WriteFile writes r to path, replacing the file, making missing parents.
func (v *Volume) WriteFile(ctx context.Context, path string, r io.Reader, opts VolumeWriteOptions) (*VolumeEntry, error) {
	q := url.Values{"path": {path}}
	opts.Parents = false
	opts.query(q)
	var out VolumeEntry
	if _, err := v.content(ctx, "write "+path, http.MethodPut, "file", q, r, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return &out, nil
}

// Remove removes path, a directory with its content.
func (v *Volume) Remove(ctx context.Context, path string) error {
	_, err := v.content(ctx, "remove "+path, http.MethodDelete, "path", url.Values{"path": {path}}, nil, new(struct{}), http.StatusNoContent)
	return err
}
