package platform

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutch-sandbox/hutch/sdk"
)

// MaxTimeout is the longest sandbox life a tool may ask for (the server's
// own limit).
const MaxTimeout = 24 * time.Hour

// SandboxRef names a sandbox.
type SandboxRef struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id, from sandbox_create or sandbox_list"`
}

// SandboxInfo describes a sandbox.
type SandboxInfo struct {
	SandboxID  string            `json:"sandbox_id"`
	Template   string            `json:"template"`
	State      string            `json:"state" jsonschema:"running or paused"`
	StartedAt  time.Time         `json:"started_at"`
	EndAt      time.Time         `json:"end_at" jsonschema:"when the sandbox will be killed unless renewed"`
	CPUs       int               `json:"cpus"`
	MemoryMB   int               `json:"memory_mb"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	Internet   *bool             `json:"internet,omitempty" jsonschema:"whether the sandbox may reach the internet"`
	ExpiresInS int64             `json:"expires_in_seconds"`
}

func infoOf(i *sdk.SandboxInfo) SandboxInfo {
	tpl := i.Name
	if tpl == "" {
		tpl = i.TemplateID
	}
	return SandboxInfo{
		SandboxID: i.SandboxID, Template: tpl, State: i.State, StartedAt: i.StartedAt, EndAt: i.EndAt,
		CPUs: i.CPUCount, MemoryMB: i.MemoryMB, Metadata: i.Metadata, Internet: i.AllowInternetAccess,
		ExpiresInS: int64(time.Until(i.EndAt).Round(time.Second) / time.Second),
	}
}

// CreateInput is sandbox_create's input.
type CreateInput struct {
	Template       string            `json:"template,omitempty" jsonschema:"template to start from; default base (Debian with bash, python3, node, git, curl)"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" jsonschema:"lifetime in seconds before the sandbox is killed (renew with sandbox_renew); default 300, at most 86400"`
	Envs           map[string]string `json:"envs,omitempty" jsonschema:"environment variables for every command in the sandbox"`
	Metadata       map[string]string `json:"metadata,omitempty" jsonschema:"labels kept with the sandbox; sandbox_list can filter on them"`
	Internet       *bool             `json:"internet,omitempty" jsonschema:"false gives the sandbox no network access at all; default true"`
}

// ListInput is sandbox_list's input.
type ListInput struct {
	Metadata map[string]string `json:"metadata,omitempty" jsonschema:"keep sandboxes whose metadata has all these pairs"`
	State    []string          `json:"state,omitempty" jsonschema:"keep sandboxes in these states (running, paused); default all"`
}

// ListOutput is sandbox_list's output.
type ListOutput struct {
	Sandboxes []SandboxInfo `json:"sandboxes"`
}

// RenewInput is sandbox_renew's input.
type RenewInput struct {
	SandboxID      string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	TimeoutSeconds int    `json:"timeout_seconds" jsonschema:"new remaining lifetime in seconds, counted from now (1 to 86400)"`
}

// KillOutput is sandbox_kill's output.
type KillOutput struct {
	Killed bool `json:"killed"`
}

// HealthOutput is sandbox_healthcheck's output.
type HealthOutput struct {
	Running bool `json:"running" jsonschema:"whether the sandbox's daemon answers"`
}

// MetricsOutput is sandbox_get_metrics's output.
type MetricsOutput struct {
	Samples []Metric `json:"samples" jsonschema:"oldest first, one every few seconds over the last 15 minutes"`
}

// Metric is one resource sample.
type Metric struct {
	Time          time.Time `json:"time"`
	CPUPercent    float64   `json:"cpu_percent"`
	MemoryUsedMB  float64   `json:"memory_used_mb"`
	MemoryTotalMB float64   `json:"memory_total_mb"`
	DiskUsedMB    float64   `json:"disk_used_mb"`
}

// EndpointInput is sandbox_get_endpoint's input.
type EndpointInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Port      int    `json:"port" jsonschema:"TCP port a server listens on inside the sandbox"`
}

// EndpointOutput says how to reach a port.
type EndpointOutput struct {
	URL     string            `json:"url" jsonschema:"URL to send requests to"`
	Headers map[string]string `json:"headers,omitempty" jsonschema:"headers every request must carry to be routed to the sandbox's port"`
	Host    string            `json:"host,omitempty" jsonschema:"the port's host name, when the server has a sandbox domain"`
}

func (s *Server) addSandboxTools(srv *mcp.Server) {
	addTool(srv, &mcp.Tool{
		Name:        "sandbox_create",
		Description: "Create a new isolated Linux sandbox and return its sandbox_id. It runs until its timeout (default 5 minutes; extend with sandbox_renew) or sandbox_kill.",
		Annotations: hint("Create sandbox", false, false, false),
	}, s.create)
	addTool(srv, &mcp.Tool{
		Name:        "sandbox_connect",
		Description: "Check that a sandbox exists and keep it alive for at least timeout_seconds more; returns its details.",
		Annotations: hint("Connect to sandbox", false, false, true),
	}, s.connect)
	addTool(srv, &mcp.Tool{
		Name:        "sandbox_kill",
		Description: "Kill a sandbox: every process stops and its files are gone. Fails if the sandbox does not exist.",
		Annotations: hint("Kill sandbox", false, true, true),
	}, s.kill)
	addTool(srv, &mcp.Tool{
		Name:        "sandbox_get_info",
		Description: "Describe a sandbox: template, state, start and end time, resources, metadata.",
		Annotations: hint("Sandbox info", true, false, true),
	}, s.getInfo)
	addTool(srv, &mcp.Tool{
		Name:        "sandbox_list",
		Description: "List the sandboxes this API key can see, optionally filtered by metadata and state.",
		Annotations: hint("List sandboxes", true, false, true),
	}, s.list)
	addTool(srv, &mcp.Tool{
		Name:        "sandbox_renew",
		Description: "Set a sandbox's remaining lifetime to timeout_seconds from now (longer or shorter than before).",
		Annotations: hint("Renew sandbox", false, false, true),
	}, s.renew)
	addTool(srv, &mcp.Tool{
		Name:        "sandbox_healthcheck",
		Description: "Report whether a sandbox is running and its daemon answers.",
		Annotations: hint("Sandbox health", true, false, true),
	}, s.health)
	addTool(srv, &mcp.Tool{
		Name:        "sandbox_get_metrics",
		Description: "CPU, memory and disk use of a sandbox, sampled every few seconds over the last 15 minutes.",
		Annotations: hint("Sandbox metrics", true, false, true),
	}, s.metrics)
	addTool(srv, &mcp.Tool{
		Name:        "sandbox_get_endpoint",
		Description: "How to reach a TCP port inside a sandbox over HTTP (for a web server started in it): the URL and the routing headers to send.",
		Annotations: hint("Port endpoint", true, false, true),
	}, s.endpoint)
}

func (s *Server) create(ctx context.Context, req *mcp.CallToolRequest, in CreateInput) (*mcp.CallToolResult, SandboxInfo, error) {
	c, err := s.client(ctx, req)
	if err != nil {
		return nil, SandboxInfo{}, err
	}
	timeout, err := timeoutOf(in.TimeoutSeconds)
	if err != nil {
		return nil, SandboxInfo{}, err
	}
	if timeout == 0 && s.opts.IdleTimeout > 0 {
		timeout = s.opts.IdleTimeout
	}
	md := map[string]string{MetadataKey: "true"}
	maps.Copy(md, in.Metadata)
	sbx, err := c.Create(ctx, sdk.CreateOptions{Template: in.Template, Timeout: timeout, Envs: in.Envs, Metadata: md, AllowInternetAccess: in.Internet})
	if err != nil {
		return nil, SandboxInfo{}, err
	}
	info, err := sbx.GetInfo(ctx)
	if err != nil {
		return nil, SandboxInfo{}, explain(err, sbx.ID)
	}
	return nil, infoOf(info), nil
}

// timeoutOf checks a timeout_seconds argument; 0 means "not given".
func timeoutOf(secs int) (time.Duration, error) {
	d := time.Duration(secs) * time.Second
	if secs < 0 || d > MaxTimeout {
		return 0, fmt.Errorf("timeout_seconds must be between 1 and %d, got %d", int(MaxTimeout/time.Second), secs)
	}
	return d, nil
}

// ConnectInput is sandbox_connect's input.
type ConnectInput struct {
	SandboxID      string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"keep the sandbox alive at least this long from now; default 300"`
}

func (s *Server) connect(ctx context.Context, req *mcp.CallToolRequest, in ConnectInput) (*mcp.CallToolResult, SandboxInfo, error) {
	return s.connectTo(ctx, req, in.SandboxID, in.TimeoutSeconds, false)
}

// connectTo connects to sandbox id for sandbox_connect and sandbox_resume
// (which resumes a paused one; reboot boots it again on its files) and
// describes it.
func (s *Server) connectTo(ctx context.Context, req *mcp.CallToolRequest, id string, timeoutSeconds int, reboot bool) (*mcp.CallToolResult, SandboxInfo, error) {
	c, err := s.client(ctx, req)
	if err != nil {
		return nil, SandboxInfo{}, err
	}
	timeout, err := timeoutOf(timeoutSeconds)
	if err != nil {
		return nil, SandboxInfo{}, err
	}
	if id == "" {
		return nil, SandboxInfo{}, fmt.Errorf("sandbox_id is required")
	}
	sbx, err := c.Connect(ctx, id, sdk.ConnectOptions{Timeout: max(timeout, s.opts.IdleTimeout), Reboot: reboot})
	if err != nil {
		return nil, SandboxInfo{}, explain(err, id)
	}
	info, err := sbx.GetInfo(ctx)
	if err != nil {
		return nil, SandboxInfo{}, explain(err, id)
	}
	return nil, infoOf(info), nil
}

func (s *Server) kill(ctx context.Context, req *mcp.CallToolRequest, in SandboxRef) (*mcp.CallToolResult, KillOutput, error) {
	c, err := s.client(ctx, req)
	if err != nil {
		return nil, KillOutput{}, err
	}
	if err := c.Kill(ctx, in.SandboxID); err != nil {
		return nil, KillOutput{}, explain(err, in.SandboxID)
	}
	return nil, KillOutput{Killed: true}, nil
}

func (s *Server) getInfo(ctx context.Context, req *mcp.CallToolRequest, in SandboxRef) (*mcp.CallToolResult, SandboxInfo, error) {
	c, err := s.client(ctx, req)
	if err != nil {
		return nil, SandboxInfo{}, err
	}
	info, err := c.GetInfo(ctx, in.SandboxID)
	if err != nil {
		return nil, SandboxInfo{}, explain(err, in.SandboxID)
	}
	return nil, infoOf(info), nil
}

func (s *Server) list(ctx context.Context, req *mcp.CallToolRequest, in ListInput) (*mcp.CallToolResult, ListOutput, error) {
	c, err := s.client(ctx, req)
	if err != nil {
		return nil, ListOutput{}, err
	}
	for _, st := range in.State {
		if st != sdk.StateRunning && st != sdk.StatePaused {
			return nil, ListOutput{}, fmt.Errorf("state must be running or paused, got %q", st)
		}
	}
	out := ListOutput{Sandboxes: []SandboxInfo{}}
	for info, err := range c.List(sdk.ListOptions{Metadata: in.Metadata, States: in.State}).All(ctx) {
		if err != nil {
			return nil, ListOutput{}, err
		}
		out.Sandboxes = append(out.Sandboxes, infoOf(&info))
	}
	return nil, out, nil
}

func (s *Server) renew(ctx context.Context, req *mcp.CallToolRequest, in RenewInput) (*mcp.CallToolResult, SandboxInfo, error) {
	c, err := s.client(ctx, req)
	if err != nil {
		return nil, SandboxInfo{}, err
	}
	timeout, err := timeoutOf(in.TimeoutSeconds)
	if err != nil || timeout == 0 {
		return nil, SandboxInfo{}, fmt.Errorf("timeout_seconds must be between 1 and %d, got %d", int(MaxTimeout/time.Second), in.TimeoutSeconds)
	}
	if err := c.SetTimeout(ctx, in.SandboxID, timeout); err != nil {
		return nil, SandboxInfo{}, explain(err, in.SandboxID)
	}
	info, err := c.GetInfo(ctx, in.SandboxID)
	if err != nil {
		return nil, SandboxInfo{}, explain(err, in.SandboxID)
	}
	return nil, infoOf(info), nil
}

func (s *Server) health(ctx context.Context, req *mcp.CallToolRequest, in SandboxRef) (*mcp.CallToolResult, HealthOutput, error) {
	sbx, err := s.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return nil, HealthOutput{}, err
	}
	ok, err := sbx.IsRunning(ctx)
	if err != nil {
		return nil, HealthOutput{}, opFailed(err, in.SandboxID)
	}
	return nil, HealthOutput{Running: ok}, nil
}

func (s *Server) metrics(ctx context.Context, req *mcp.CallToolRequest, in SandboxRef) (*mcp.CallToolResult, MetricsOutput, error) {
	c, err := s.client(ctx, req)
	if err != nil {
		return nil, MetricsOutput{}, err
	}
	ms, err := c.GetMetrics(ctx, in.SandboxID, sdk.MetricsOptions{})
	if err != nil {
		return nil, MetricsOutput{}, explain(err, in.SandboxID)
	}
	out := MetricsOutput{Samples: []Metric{}}
	const mb = 1 << 20
	for _, m := range ms {
		out.Samples = append(out.Samples, Metric{Time: m.Timestamp, CPUPercent: m.CPUUsedPct,
			MemoryUsedMB: float64(m.MemUsed) / mb, MemoryTotalMB: float64(m.MemTotal) / mb, DiskUsedMB: float64(m.DiskUsed) / mb})
	}
	return nil, out, nil
}

func (s *Server) endpoint(ctx context.Context, req *mcp.CallToolRequest, in EndpointInput) (*mcp.CallToolResult, EndpointOutput, error) {
	if in.Port < 1 || in.Port > 65535 {
		return nil, EndpointOutput{}, fmt.Errorf("port must be between 1 and 65535, got %d", in.Port)
	}
	sbx, err := s.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return nil, EndpointOutput{}, err
	}
	r, err := sbx.PortRequest(ctx, "GET", in.Port, "/", nil)
	if err != nil {
		return nil, EndpointOutput{}, err
	}
	out := EndpointOutput{URL: r.URL.String(), Headers: map[string]string{}}
	for _, k := range []string{"E2b-Sandbox-Id", "E2b-Sandbox-Port", "E2b-Traffic-Access-Token"} {
		if v := r.Header.Get(k); v != "" {
			out.Headers[k] = v
		}
	}
	if sbx.Domain != "" {
		out.Host = sbx.Host(in.Port)
	}
	return nil, out, nil
}
