package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/e2bapi"
)

// Sandbox is a handle on a running sandbox, from [Create] or [Connect].
// It is safe for concurrent use.
type Sandbox struct {
	// ID identifies the sandbox.
	ID string
	// TemplateID is the template it was made from.
	TemplateID string
	// EnvdVersion is the version of its daemon.
	EnvdVersion string
	// EnvdAccessToken authenticates envd requests and signs file URLs;
	// empty for sandboxes created without one.
	EnvdAccessToken string
	// TrafficAccessToken must be sent in the e2b-traffic-access-token
	// header to reach the sandbox's ports when public traffic is off.
	TrafficAccessToken string
	// Domain is the sandbox domain the server reported, if any.
	Domain string
	// mcpToken is the MCP gateway's token, once known (MCPToken).
	mcpToken string

	// Commands runs processes in the sandbox.
	Commands *Commands
	// Pty runs interactive terminals in the sandbox.
	Pty *Pty
	// Files reads, writes and watches the sandbox's files.
	Files *Files

	client *Client
	envd   *envdClient
}

// CreateOptions configure [Create].
type CreateOptions struct {
	// Config says how to reach the server.
	Config Config
	// Template names the template; empty means "base".
	Template string
	// Timeout is the sandbox's lifetime, after which it is killed; 0 means
	// the server's default (5 minutes). At most 24 hours.
	Timeout time.Duration
	// Metadata is kept with the sandbox and can be filtered on by List.
	Metadata map[string]string
	// Envs is the default environment of every command in the sandbox.
	Envs map[string]string
	// AllowInternetAccess false gives the sandbox no route out; nil means
	// allowed.
	AllowInternetAccess *bool
	// Network restricts egress and ingress; nil means defaults.
	Network *Network
	// MCP, if set, names the MCP servers the sandbox runs behind its
	// gateway (E2B's mcp option: catalog names such as "memory" or
	// "airtable" with their fields, "github/<owner>/<repo>" entries, or
	// {"command", "args", "env"}; docs/mcp-gateway.md). Create starts the
	// gateway, as E2B's SDKs do, and fails (killing the sandbox) with
	// "Failed to start MCP gateway: …" when it does not start; Template
	// defaults to MCPTemplate. See [Sandbox.MCPURL], [Sandbox.MCPToken]
	// and [Sandbox.MCPClient].
	MCP map[string]any
	// Volumes are mounted into the sandbox, each volume (by name) at its
	// absolute path.
	Volumes []VolumeMount
	// Runtime names the runtime backend to run the sandbox on ("native",
	// "gvisor"); empty means the template's, else the server's default.
	// It travels as the metadata key RuntimeMetadata, which Hutch adds to
	// every sandbox's metadata it reports.
	Runtime string

	// The fields below are Hutch's, not E2B's: E2B's create request has
	// no place for them. Setting any of them makes Create use the
	// OpenSandbox lifecycle API that hutch serve also speaks (POST
	// /v1/sandboxes), where Template, Timeout, Metadata, Envs and Runtime
	// mean what they mean here; Network, AllowInternetAccess, MCP and
	// Volumes cannot be combined with them (ErrInvalidArgument). Timeout
	// is then at least a minute, and 0 still means 5 minutes. A server
	// without that API answers ErrNotFound.

	// Image is what the sandbox starts from: a template name, or an OCI
	// image reference ("python:3.12", "ghcr.io/org/app:v1"), which the
	// server imports into its template store (the first time, within the
	// request timeout). Empty means Template; setting both is an error.
	Image string
	// ImageAuth authenticates the pull of Image from a private registry.
	ImageAuth *RegistryAuth
	// Resources are the sandbox's own limits, in Kubernetes' quantities
	// as OpenSandbox takes them: {"cpu": "500m", "memory": "512Mi"}. Nil
	// means the server's defaults.
	Resources map[string]string
	// Entrypoint, if set, is started in the background once the sandbox
	// is up (argv, no shell).
	Entrypoint []string
	// NetworkPolicy restricts the sandbox's egress by rules; nil means
	// the server's default (allowed).
	NetworkPolicy *NetworkPolicy
	// Extensions are passed to the server as they are.
	Extensions map[string]string
}

// RegistryAuth is a registry's user name and password (or token).
type RegistryAuth struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// NetworkPolicy is an egress policy as OpenSandbox states it: rules
// judged in order, the first whose target matches deciding, and a
// default for what none matches.
type NetworkPolicy struct {
	// DefaultAction is "allow" or "deny"; empty means "deny".
	DefaultAction string `json:"defaultAction,omitempty"`
	// Egress are the rules.
	Egress []NetworkRule `json:"egress,omitempty"`
}

// NetworkRule allows or denies one target: a domain ("pypi.org"), a
// wildcard domain ("*.example.com"), an address or a CIDR.
type NetworkRule struct {
	// Action is "allow" or "deny".
	Action string `json:"action"`
	Target string `json:"target"`
}

// RuntimeMetadata is the metadata key that names a sandbox's runtime
// backend: in a create request, the one to run on; in every sandbox's
// metadata Hutch reports, the one it runs on.
const RuntimeMetadata = "hutch.runtime"

// Network is a sandbox's network policy (E2B's network object).
type Network struct {
	// AllowOut lists addresses, CIDRs and domains ("example.com",
	// "*.example.com") that may be reached even when DenyOut blocks them.
	AllowOut []string `json:"allowOut,omitempty"`
	// DenyOut lists addresses and CIDRs that may not be reached;
	// "0.0.0.0/0" denies everything not allowed.
	DenyOut []string `json:"denyOut,omitempty"`
	// AllowPublicTraffic false requires the TrafficAccessToken on requests
	// to the sandbox's ports; nil means true.
	AllowPublicTraffic *bool `json:"allowPublicTraffic,omitempty"`
	// MaskRequestHost replaces the Host header of requests to the
	// sandbox's ports; "${PORT}" stands for the port.
	MaskRequestHost string `json:"maskRequestHost,omitempty"`
}

// Create makes a new sandbox and returns once its daemon answers.
func Create(ctx context.Context, opts CreateOptions) (*Sandbox, error) {
	c, err := NewClient(opts.Config)
	if err != nil {
		return nil, err
	}
	return c.Create(ctx, opts)
}

// Create makes a new sandbox; opts.Config is ignored in favour of the
// client's.
func (c *Client) Create(ctx context.Context, opts CreateOptions) (*Sandbox, error) {
	if opts.openSandbox() {
		return c.createOpenSandbox(ctx, opts)
	}
	req := e2bapi.NewSandboxV2{
		TemplateID: opts.Template, Metadata: opts.Metadata, EnvVars: opts.Envs,
		AllowInternetAccess: opts.AllowInternetAccess,
	}
	if opts.Runtime != "" {
		req.Metadata = maps.Clone(opts.Metadata)
		if req.Metadata == nil {
			req.Metadata = map[string]string{}
		}
		req.Metadata[RuntimeMetadata] = opts.Runtime
	}
	if opts.Timeout != 0 {
		t := seconds(opts.Timeout)
		req.Timeout = &t
	}
	if n := opts.Network; n != nil {
		req.Network = &e2bapi.NetworkConfig{AllowOut: n.AllowOut, DenyOut: n.DenyOut, AllowPublicTraffic: n.AllowPublicTraffic}
		if n.MaskRequestHost != "" {
			req.Network.MaskRequestHost = &n.MaskRequestHost
		}
	}
	if opts.MCP != nil {
		b, err := json.Marshal(opts.MCP)
		if err != nil {
			return nil, &Error{Op: "create sandbox", Kind: ErrInvalidArgument, Message: "mcp: " + err.Error()}
		}
		req.MCP = b
		if req.TemplateID == "" {
			req.TemplateID = MCPTemplate
		}
	}
	for _, v := range opts.Volumes {
		req.VolumeMounts = append(req.VolumeMounts, e2bapi.VolumeMount{Name: v.Name, Path: v.Path})
	}
	var out e2bapi.Sandbox
	if _, err := c.api(ctx, "create sandbox", http.MethodPost, "/v2/sandboxes", nil, req, &out, http.StatusCreated); err != nil {
		return nil, err
	}
	sb := c.newSandbox(out)
	if req.MCP != nil {
		if err := sb.startMCP(ctx, req.MCP); err != nil {
			sb.Kill(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	return sb, nil
}

// seconds rounds d up to whole seconds, as E2B's SDKs do.
func seconds(d time.Duration) int32 {
	s := math.Ceil(d.Seconds())
	if s > math.MaxInt32 {
		return math.MaxInt32
	}
	return int32(s)
}

// ConnectOptions configure [Connect].
type ConnectOptions struct {
	// Config says how to reach the server.
	Config Config
	// Timeout, if set, extends the sandbox's lifetime to at least this
	// long from now; 0 means the server's default (5 minutes).
	Timeout time.Duration
	// Reboot resumes a paused sandbox by booting it again on its files,
	// as E2B's onResume 'reboot': a sandbox paused with its memory loses
	// it. A running sandbox is not rebooted.
	Reboot bool
}

// Connect returns a handle on an existing sandbox by id. A paused sandbox
// is resumed. It fails with ErrNotFound for unknown ids.
func Connect(ctx context.Context, id string, opts ConnectOptions) (*Sandbox, error) {
	c, err := NewClient(opts.Config)
	if err != nil {
		return nil, err
	}
	return c.Connect(ctx, id, opts)
}

// Connect returns a handle on an existing sandbox; opts.Config is ignored.
func (c *Client) Connect(ctx context.Context, id string, opts ConnectOptions) (*Sandbox, error) {
	var req e2bapi.ConnectRequest
	if opts.Timeout != 0 {
		t := seconds(opts.Timeout)
		req.Timeout = &t
	}
	if opts.Reboot {
		no := false
		req.Memory = &no
	}
	var out e2bapi.Sandbox
	op := "connect to sandbox " + id
	if _, err := c.api(ctx, op, http.MethodPost, "/v2/sandboxes/"+url.PathEscape(id)+"/connect", nil, req, &out, http.StatusOK, http.StatusCreated); err != nil {
		return nil, err
	}
	return c.newSandbox(out), nil
}

func (c *Client) newSandbox(s e2bapi.Sandbox) *Sandbox {
	sbx := &Sandbox{
		ID: s.SandboxID, TemplateID: s.TemplateID, EnvdVersion: s.EnvdVersion,
		EnvdAccessToken: s.EnvdAccessToken, client: c,
	}
	if s.TrafficAccessToken != nil {
		sbx.TrafficAccessToken = *s.TrafficAccessToken
	}
	if s.Domain != nil {
		sbx.Domain = *s.Domain
	}
	sbx.envd = newEnvdClient(c, sbx)
	sbx.Commands = &Commands{envd: sbx.envd}
	sbx.Pty = &Pty{envd: sbx.envd}
	sbx.Files = &Files{envd: sbx.envd}
	return sbx
}

// Kill kills the sandbox and removes everything it had.
func (s *Sandbox) Kill(ctx context.Context) error { return s.client.Kill(ctx, s.ID) }

// Kill kills the sandbox id; ErrNotFound if there is no such sandbox (any
// more).
func (c *Client) Kill(ctx context.Context, id string) error {
	_, err := c.api(ctx, "kill sandbox "+id, http.MethodDelete, "/sandboxes/"+url.PathEscape(id), nil, nil, nil, http.StatusNoContent)
	return err
}

// SetTimeout sets the sandbox's remaining lifetime to d from now (shorter
// or longer than before).
func (s *Sandbox) SetTimeout(ctx context.Context, d time.Duration) error {
	return s.client.SetTimeout(ctx, s.ID, d)
}

// SetTimeout sets sandbox id's remaining lifetime to d from now.
func (c *Client) SetTimeout(ctx context.Context, id string, d time.Duration) error {
	_, err := c.api(ctx, "set timeout of sandbox "+id, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/timeout", nil,
		e2bapi.TimeoutRequest{Timeout: seconds(d)}, nil, http.StatusNoContent)
	return err
}

// SandboxInfo describes a sandbox, as listed or from GetInfo.
type SandboxInfo struct {
	SandboxID  string            `json:"sandboxID"`
	TemplateID string            `json:"templateID"`
	Name       string            `json:"name,omitempty"` // the template alias it was created from
	Metadata   map[string]string `json:"metadata"`
	StartedAt  time.Time         `json:"startedAt"`
	EndAt      time.Time         `json:"endAt"`
	// State is "running" or "paused".
	State       string `json:"state"`
	CPUCount    int    `json:"cpuCount"`
	MemoryMB    int    `json:"memoryMB"`
	DiskSizeMB  int    `json:"diskSizeMB"`
	EnvdVersion string `json:"envdVersion"`
	// VolumeMounts are the volumes mounted into the sandbox.
	VolumeMounts []VolumeMount `json:"volumeMounts,omitempty"`
	// AllowInternetAccess and Network are set by GetInfo only.
	AllowInternetAccess *bool    `json:"allowInternetAccess,omitempty"`
	Network             *Network `json:"network,omitempty"`
}

func infoOf(l e2bapi.ListedSandbox) SandboxInfo {
	md := l.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return SandboxInfo{
		SandboxID: l.SandboxID, TemplateID: l.TemplateID, Name: l.Alias, Metadata: md,
		StartedAt: time.Time(l.StartedAt), EndAt: time.Time(l.EndAt), State: l.State,
		CPUCount: int(l.CPUCount), MemoryMB: int(l.MemoryMB), DiskSizeMB: int(l.DiskSizeMB), EnvdVersion: l.EnvdVersion,
		VolumeMounts: volumeMounts(l.VolumeMounts),
	}
}

// GetInfo describes the sandbox.
func (s *Sandbox) GetInfo(ctx context.Context) (*SandboxInfo, error) {
	return s.client.GetInfo(ctx, s.ID)
}

// GetInfo describes sandbox id; ErrNotFound if there is none.
func (c *Client) GetInfo(ctx context.Context, id string) (*SandboxInfo, error) {
	var d e2bapi.SandboxDetail
	if _, err := c.api(ctx, "get sandbox "+id, http.MethodGet, "/sandboxes/"+url.PathEscape(id), nil, nil, &d, http.StatusOK); err != nil {
		return nil, err
	}
	info := infoOf(d.ListedSandbox)
	info.AllowInternetAccess = d.AllowInternetAccess
	if n := d.Network; n != nil {
		info.Network = &Network{AllowOut: n.AllowOut, DenyOut: n.DenyOut, AllowPublicTraffic: n.AllowPublicTraffic}
		if n.MaskRequestHost != nil {
			info.Network.MaskRequestHost = *n.MaskRequestHost
		}
	}
	return &info, nil
}

// UpdateNetwork replaces the sandbox's egress policy: fields left empty are
// cleared. Established connections the new policy denies are cut.
func (s *Sandbox) UpdateNetwork(ctx context.Context, n Network) error {
	body := map[string]any{"allowOut": n.AllowOut, "denyOut": n.DenyOut}
	if n.AllowOut == nil {
		body["allowOut"] = []string{}
	}
	if n.DenyOut == nil {
		body["denyOut"] = []string{}
	}
	_, err := s.client.api(ctx, "update network of sandbox "+s.ID, http.MethodPut, "/sandboxes/"+url.PathEscape(s.ID)+"/network", nil, body, nil, http.StatusNoContent)
	return err
}

// Metric is one sample of a sandbox's resource use.
type Metric struct {
	Timestamp  time.Time `json:"timestamp"`
	CPUCount   int       `json:"cpuCount"`
	CPUUsedPct float64   `json:"cpuUsedPct"`
	MemUsed    int64     `json:"memUsed"`
	MemTotal   int64     `json:"memTotal"`
	MemCache   int64     `json:"memCache"`
	DiskUsed   int64     `json:"diskUsed"`
	DiskTotal  int64     `json:"diskTotal"`
}

// MetricsOptions select samples by time; zero values mean no bound.
type MetricsOptions struct {
	Start, End time.Time
}

// GetMetrics returns the sandbox's resource samples, oldest first (one
// every few seconds, the last 15 minutes).
func (s *Sandbox) GetMetrics(ctx context.Context, opts MetricsOptions) ([]Metric, error) {
	return s.client.GetMetrics(ctx, s.ID, opts)
}

// GetMetrics returns sandbox id's resource samples.
func (c *Client) GetMetrics(ctx context.Context, id string, opts MetricsOptions) ([]Metric, error) {
	q := url.Values{}
	if !opts.Start.IsZero() {
		q.Set("start", strconv.FormatInt(opts.Start.Unix(), 10))
	}
	if !opts.End.IsZero() {
		q.Set("end", strconv.FormatInt(opts.End.Unix(), 10))
	}
	var raw []e2bapi.SandboxMetric
	if _, err := c.api(ctx, "get metrics of sandbox "+id, http.MethodGet, "/sandboxes/"+url.PathEscape(id)+"/metrics", q, nil, &raw, http.StatusOK); err != nil {
		return nil, err
	}
	out := make([]Metric, len(raw))
	for i, m := range raw {
		out[i] = Metric{
			Timestamp: time.Time(m.Timestamp), CPUCount: int(m.CPUCount), CPUUsedPct: float64(m.CPUUsedPct),
			MemUsed: m.MemUsed, MemTotal: m.MemTotal, MemCache: m.MemCache, DiskUsed: m.DiskUsed, DiskTotal: m.DiskTotal,
		}
	}
	return out, nil
}

// LogEntry is one line of a sandbox's log: what its daemon did (processes
// started and ended, failures).
type LogEntry struct {
	Timestamp time.Time         `json:"timestamp"`
	Level     string            `json:"level"`
	Message   string            `json:"message"`
	Fields    map[string]string `json:"fields,omitempty"`
}

// LogsOptions select log entries.
type LogsOptions struct {
	// Since keeps entries at or after this time; zero means from the
	// start.
	Since time.Time
	// Limit caps the number of entries; 0 means the server's default
	// (1000).
	Limit int
}

// Logs returns the sandbox's log entries, oldest first.
func (c *Client) Logs(ctx context.Context, id string, opts LogsOptions) ([]LogEntry, error) {
	q := url.Values{"direction": {"forward"}}
	if !opts.Since.IsZero() {
		q.Set("cursor", strconv.FormatInt(opts.Since.UnixMilli(), 10))
	}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	var out struct {
		Logs []LogEntry `json:"logs"`
	}
	if _, err := c.api(ctx, "get logs of sandbox "+id, http.MethodGet, "/v2/sandboxes/"+url.PathEscape(id)+"/logs", q, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return out.Logs, nil
}

// Logs returns the sandbox's log entries, oldest first.
func (s *Sandbox) Logs(ctx context.Context, opts LogsOptions) ([]LogEntry, error) {
	return s.client.Logs(ctx, s.ID, opts)
}

// IsRunning reports whether the sandbox's daemon answers.
func (s *Sandbox) IsRunning(ctx context.Context) (bool, error) {
	ctx, cancel := s.client.requestContext(ctx)
	defer cancel()
	req, err := s.envd.newRequest(ctx, http.MethodGet, "/health", "", nil)
	if err != nil {
		return false, err
	}
	resp, err := s.envd.do("health of sandbox "+s.ID, req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode < 300:
		return true, nil
	case resp.StatusCode == http.StatusBadGateway:
		return false, nil
	}
	return false, httpError("health of sandbox "+s.ID, resp)
}

// Host returns the host name of the sandbox's port, "<port>-<id>.<domain>",
// as E2B's getHost does. It needs a sandbox domain (from the server or
// Config.Domain); without one, reach ports with [Sandbox.PortRequest].
func (s *Sandbox) Host(port int) string {
	return fmt.Sprintf("%d-%s.%s", port, s.ID, s.domain())
}

func (s *Sandbox) domain() string {
	if s.Domain != "" {
		return s.Domain
	}
	if d := s.client.cfg.Domain; d != "" {
		return d
	}
	return "e2b.app"
}

// PortRequest makes an HTTP request to port of the sandbox through the
// server's routing: to the sandbox URL with the E2b-Sandbox-Id and
// E2b-Sandbox-Port headers (and the traffic access token when the sandbox
// has one), or to https://<port>-<id>.<domain> when only a domain is
// configured. path is the request path and query, e.g. "/index.html".
func (s *Sandbox) PortRequest(ctx context.Context, method string, port int, path string, body io.Reader) (*http.Request, error) {
	base := s.client.cfg.SandboxURL
	if base == "" {
		base = "https://" + s.Host(port)
	}
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, body)
	if err != nil {
		return nil, &Error{Op: "request to port " + strconv.Itoa(port), Kind: ErrInvalidArgument, Err: err}
	}
	req.Header.Set("E2b-Sandbox-Id", s.ID)
	req.Header.Set("E2b-Sandbox-Port", strconv.Itoa(port))
	if s.TrafficAccessToken != "" {
		req.Header.Set("E2b-Traffic-Access-Token", s.TrafficAccessToken)
	}
	return req, nil
}

// HTTPClient returns the HTTP client the SDK uses, for requests made with
// [Sandbox.PortRequest].
func (s *Sandbox) HTTPClient() *http.Client { return s.client.cfg.HTTPClient }

// PauseOptions say how a sandbox is paused.
type PauseOptions struct {
	// Filesystem keeps only the sandbox's files (E2B's keepMemory false,
	// mode "filesystem"): every process is stopped and its memory and slot
	// freed; Connect boots it again on its files. The zero value keeps
	// memory: the sandbox is frozen in place.
	Filesystem bool
}

// Pause pauses the sandbox, by default keeping its processes and memory
// (it is frozen in place) and its files; it reports false when the
// sandbox was paused already. Client.Connect resumes it, with the same id
// and tokens.
func (s *Sandbox) Pause(ctx context.Context, opts ...PauseOptions) (bool, error) {
	return s.client.Pause(ctx, s.ID, opts...)
}

// Pause pauses sandbox id (see Sandbox.Pause); false when it was paused
// already, ErrNotFound when there is no such sandbox.
func (c *Client) Pause(ctx context.Context, id string, opts ...PauseOptions) (bool, error) {
	var req e2bapi.PauseRequest
	if len(opts) > 0 && opts[0].Filesystem {
		no := false
		req.Memory = &no
	}
	_, err := c.api(ctx, "pause sandbox "+id, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/pause", nil,
		req, nil, http.StatusNoContent)
	if errors.Is(err, ErrConflict) {
		return false, nil
	}
	return err == nil, err
}
