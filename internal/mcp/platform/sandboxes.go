package platform

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"strings"
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

// CreateInput is sandbox_create's input, in Hutch's shape (template,
// envs, internet) or OpenSandbox's (image, env, resource, network_policy,
// entrypoint, …).
type CreateInput struct {
	Template       string            `json:"template,omitempty" jsonschema:"template to start from; default base (Debian with bash, python3, node, git, curl). OpenSandbox's name: image"`
	Image          string            `json:"image,omitempty" jsonschema:"OpenSandbox's: a template name or an OCI image reference (python:3.12) to start from, imported the first time it is used. Give template or image"`
	TimeoutSeconds float64           `json:"timeout_seconds,omitempty" jsonschema:"lifetime in seconds before the sandbox is killed (renew with sandbox_renew); default 300 (600 in OpenSandbox's shape), at most 86400"`
	Envs           map[string]string `json:"envs,omitempty" jsonschema:"environment variables for every command in the sandbox. OpenSandbox's name: env"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"OpenSandbox's name of envs"`
	Metadata       map[string]string `json:"metadata,omitempty" jsonschema:"labels kept with the sandbox; sandbox_list can filter on them"`
	Internet       *bool             `json:"internet,omitempty" jsonschema:"false gives the sandbox no network access at all; default true. Give internet or network_policy"`
	// OpenSandbox's.
	Resource                     map[string]string   `json:"resource,omitempty" jsonschema:"OpenSandbox's: the sandbox's own limits in Kubernetes quantities, e.g. {\"cpu\": \"1\", \"memory\": \"2Gi\"}; default the server's"`
	NetworkPolicy                *NetworkPolicyInput `json:"network_policy,omitempty" jsonschema:"OpenSandbox's: egress rules judged in order, first match deciding, and a default for the rest"`
	Entrypoint                   []string            `json:"entrypoint,omitempty" jsonschema:"OpenSandbox's: a command (argv, no shell) started in the background once the sandbox is up"`
	ReadyTimeoutSeconds          float64             `json:"ready_timeout_seconds,omitempty" jsonschema:"OpenSandbox's: how long to wait for the new sandbox to answer; default 30"`
	HealthCheckPollingIntervalMS int                 `json:"health_check_polling_interval_ms,omitempty" jsonschema:"OpenSandbox's: how often to ask while waiting, in milliseconds; default 200"`
	SkipHealthCheck              *bool               `json:"skip_health_check,omitempty" jsonschema:"OpenSandbox's: true returns without waiting for the sandbox to answer"`
	AuthUsername                 string              `json:"auth_username,omitempty" jsonschema:"OpenSandbox's: registry user name for a private image (with auth_password)"`
	AuthPassword                 string              `json:"auth_password,omitempty" jsonschema:"OpenSandbox's: registry password or token for a private image (with auth_username)"`
	Extensions                   map[string]string   `json:"extensions,omitempty" jsonschema:"OpenSandbox's: passed to the server as they are"`
}

// openSandbox reports whether the call is in OpenSandbox's shape.
func (in CreateInput) openSandbox() bool {
	return in.Image != "" || in.Env != nil || in.Resource != nil || in.NetworkPolicy != nil || in.Entrypoint != nil ||
		in.ReadyTimeoutSeconds != 0 || in.HealthCheckPollingIntervalMS != 0 || in.SkipHealthCheck != nil ||
		in.AuthUsername != "" || in.AuthPassword != "" || in.Extensions != nil
}

// NetworkPolicyInput is OpenSandbox's NetworkPolicy.
type NetworkPolicyInput struct {
	DefaultAction      string             `json:"default_action,omitempty" jsonschema:"allow or deny what no rule matches; default deny"`
	DefaultActionAlias string             `json:"defaultAction,omitempty" jsonschema:"the same as default_action"`
	Egress             []NetworkRuleInput `json:"egress,omitempty"`
}

// NetworkRuleInput is one egress rule.
type NetworkRuleInput struct {
	Action string `json:"action" jsonschema:"allow or deny"`
	Target string `json:"target" jsonschema:"a domain (pypi.org), a wildcard domain (*.example.com), an address or a CIDR"`
}

// CreateOutput describes a new or connected sandbox in both shapes:
// Hutch's fields, and OpenSandbox's sandbox_id and info.
type CreateOutput struct {
	SandboxInfo
	Info OpenSandboxInfo `json:"info" jsonschema:"the sandbox as OpenSandbox describes it"`
}

// GetInfoOutput describes a sandbox in both shapes at once: Hutch's
// fields and OpenSandbox's.
type GetInfoOutput struct {
	SandboxInfo
	OpenSandboxFields
}

// ListInput is sandbox_list's input: Hutch's metadata and state, or
// OpenSandbox's filter.
type ListInput struct {
	Metadata map[string]string `json:"metadata,omitempty" jsonschema:"keep sandboxes whose metadata has all these pairs"`
	State    []string          `json:"state,omitempty" jsonschema:"keep sandboxes in these states (running, paused); default all"`
	Filter   *SandboxFilter    `json:"filter,omitempty" jsonschema:"OpenSandbox's: states, metadata and a page; the result is then OpenSandbox's (sandbox_infos, pagination)"`
}

// SandboxFilter is OpenSandbox's SandboxFilter.
type SandboxFilter struct {
	States   []string          `json:"states,omitempty" jsonschema:"keep sandboxes in these states (Running, Paused; any case); default all"`
	Metadata map[string]string `json:"metadata,omitempty" jsonschema:"keep sandboxes whose metadata has all these pairs"`
	Page     int               `json:"page,omitempty" jsonschema:"page number, from 1; default 1"`
	PageSize int               `json:"page_size,omitempty" jsonschema:"sandboxes per page, 1 to 1000; default 20"`
}

// ListOutput is sandbox_list's output in Hutch's shape.
type ListOutput struct {
	Sandboxes []SandboxInfo `json:"sandboxes"`
}

// PagedSandboxInfos is sandbox_list's output in OpenSandbox's shape.
type PagedSandboxInfos struct {
	SandboxInfos []OpenSandboxInfo `json:"sandbox_infos"`
	Pagination   Pagination        `json:"pagination"`
}

// Pagination says where a page is in a listing.
type Pagination struct {
	Page        int  `json:"page"`
	PageSize    int  `json:"page_size"`
	TotalItems  int  `json:"total_items"`
	TotalPages  int  `json:"total_pages"`
	HasNextPage bool `json:"has_next_page"`
}

// RenewInput is sandbox_renew's input.
type RenewInput struct {
	SandboxID      string  `json:"sandbox_id" jsonschema:"the sandbox's id"`
	TimeoutSeconds float64 `json:"timeout_seconds" jsonschema:"new remaining lifetime in seconds, counted from now (1 to 86400)"`
}

// RenewOutput is sandbox_renew's output: the sandbox, and OpenSandbox's
// expires_at.
type RenewOutput struct {
	SandboxInfo
	ExpiresAt time.Time `json:"expires_at" jsonschema:"the new end of its life (OpenSandbox's name of end_at)"`
}

// KillOutput is sandbox_kill's output.
type KillOutput struct {
	Killed bool   `json:"killed"`
	Status string `json:"status" jsonschema:"killed (OpenSandbox's result)"`
}

// ProbeInput is the input of sandbox_healthcheck and
// sandbox_get_metrics.
type ProbeInput struct {
	SandboxID        string `json:"sandbox_id" jsonschema:"the sandbox's id, from sandbox_create or sandbox_list"`
	ConnectIfMissing *bool  `json:"connect_if_missing,omitempty" jsonschema:"OpenSandbox's; ignored: every sandbox of the key is reachable"`
}

// HealthOutput is sandbox_healthcheck's output.
type HealthOutput struct {
	Running   bool   `json:"running" jsonschema:"whether the sandbox's daemon answers"`
	SandboxID string `json:"sandbox_id"`
	Healthy   bool   `json:"healthy" jsonschema:"the same as running (OpenSandbox's name)"`
}

// MetricsOutput is sandbox_get_metrics's output: Hutch's samples, and
// the last of them as OpenSandbox gives it.
type MetricsOutput struct {
	Samples []Metric `json:"samples" jsonschema:"oldest first, one every few seconds over the last 15 minutes"`
	// OpenSandbox's, from the last sample; absent before the first.
	CPUCount          *float64 `json:"cpu_count,omitempty" jsonschema:"CPUs of the last sample"`
	CPUUsedPercentage *float64 `json:"cpu_used_percentage,omitempty"`
	MemoryTotalInMiB  *float64 `json:"memory_total_in_mib,omitempty"`
	MemoryUsedInMiB   *float64 `json:"memory_used_in_mib,omitempty"`
	Timestamp         *int64   `json:"timestamp,omitempty" jsonschema:"the last sample's time, Unix milliseconds"`
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
	SandboxID        string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Port             int    `json:"port" jsonschema:"TCP port a server listens on inside the sandbox"`
	ConnectIfMissing *bool  `json:"connect_if_missing,omitempty" jsonschema:"OpenSandbox's; ignored"`
}

// EndpointOutput says how to reach a port.
type EndpointOutput struct {
	URL      string            `json:"url" jsonschema:"base URL to send requests to: the port's paths go after it (URL + index.html)"`
	Headers  map[string]string `json:"headers" jsonschema:"headers every request must carry: the sandbox's token for the port, when it needs one"`
	Host     string            `json:"host,omitempty" jsonschema:"the port's host name, when the server has a sandbox domain: https://HOST/PATH reaches the port at its root path"`
	Endpoint string            `json:"endpoint" jsonschema:"url without its scheme and final slash, as OpenSandbox gives it: requests go to http(s)://ENDPOINT/PATH with the headers"`
	Origin   string            `json:"origin,omitempty" jsonschema:"what backs the sandbox, as the server says (template)"`
}

func (s *Server) addSandboxTools(srv *mcp.Server) {
	addTool(srv, &mcp.Tool{
		Name: "sandbox_create",
		Description: "Create a new isolated Linux sandbox and return its sandbox_id (and its details, also as OpenSandbox's info). It runs until its timeout (default 5 minutes, 10 in OpenSandbox's shape; extend with sandbox_renew) or sandbox_kill. " +
			"Hutch's shape: template, envs, internet. OpenSandbox's: image (a template or an OCI image such as python:3.12), env, resource ({\"cpu\":\"1\",\"memory\":\"2Gi\"}), network_policy, entrypoint, ready_timeout_seconds. Either shape takes timeout_seconds and metadata.",
		Annotations: hint("Create sandbox", false, false, false),
	}, s.create)
	addTool(srv, &mcp.Tool{
		Name:        "sandbox_connect",
		Description: "Check that a sandbox exists and keep it alive for at least timeout_seconds more (OpenSandbox's shape: connect_timeout_seconds waits for it to answer, its life unchanged); returns its details, also as OpenSandbox's info.",
		Annotations: hint("Connect to sandbox", false, false, true),
	}, s.connect)
	addTool(srv, &mcp.Tool{
		Name:        "sandbox_kill",
		Description: "Kill a sandbox: every process stops and its files are gone. Fails if the sandbox does not exist. Returns killed: true and status: killed.",
		Annotations: hint("Kill sandbox", false, true, true),
	}, s.kill)
	addTool(srv, &mcp.Tool{
		Name:        "sandbox_get_info",
		Description: "Describe a sandbox: template, state, start and end time, resources, metadata; the same again in OpenSandbox's fields (id, status, created_at, expires_at, image).",
		Annotations: hint("Sandbox info", true, false, true),
	}, s.getInfo)
	addShapedTool[ListInput, ListOutput, PagedSandboxInfos](srv, &mcp.Tool{
		Name: "sandbox_list",
		Description: "List the sandboxes this API key can see, optionally filtered by metadata and state (→ sandboxes). " +
			"OpenSandbox's shape: filter {states, metadata, page, page_size} (→ sandbox_infos and pagination, newest first).",
		Annotations: hint("List sandboxes", true, false, true),
	}, s.list)
	addTool(srv, &mcp.Tool{
		Name:        "sandbox_renew",
		Description: "Set a sandbox's remaining lifetime to timeout_seconds from now (longer or shorter than before); returns its details with the new end (end_at, and OpenSandbox's expires_at).",
		Annotations: hint("Renew sandbox", false, false, true),
	}, s.renew)
	addTool(srv, &mcp.Tool{
		Name:        "sandbox_healthcheck",
		Description: "Report whether a sandbox is running and its daemon answers (running, and OpenSandbox's healthy).",
		Annotations: hint("Sandbox health", true, false, true),
	}, s.health)
	addTool(srv, &mcp.Tool{
		Name:        "sandbox_get_metrics",
		Description: "CPU, memory and disk use of a sandbox, sampled every few seconds over the last 15 minutes; the last sample also in OpenSandbox's fields.",
		Annotations: hint("Sandbox metrics", true, false, true),
	}, s.metrics)
	addTool(srv, &mcp.Tool{
		Name:        "sandbox_get_endpoint",
		Description: "How to reach a TCP port inside a sandbox over HTTP (for a web server started in it): the URL (and OpenSandbox's endpoint, the same without its scheme) and the routing headers to send.",
		Annotations: hint("Port endpoint", true, false, true),
	}, s.endpoint)
}

// OpenSandbox's defaults.
const (
	osbTimeout      = 600 * time.Second
	osbReadyTimeout = 30 * time.Second
	osbPollInterval = 200 * time.Millisecond
	maxReadyTimeout = 10 * time.Minute
)

func (s *Server) create(ctx context.Context, req *mcp.CallToolRequest, in CreateInput) (*mcp.CallToolResult, CreateOutput, error) {
	for _, err := range []error{
		conflict("template", in.Template != "", "image", in.Image != ""),
		conflict("envs", in.Envs != nil, "env", in.Env != nil),
		conflict("internet", in.Internet != nil, "network_policy", in.NetworkPolicy != nil),
	} {
		if err != nil {
			return nil, CreateOutput{}, err
		}
	}
	if (in.AuthUsername == "") != (in.AuthPassword == "") {
		return nil, CreateOutput{}, errors.New("auth_username and auth_password go together")
	}
	timeout, err := seconds("timeout_seconds", in.TimeoutSeconds, MaxTimeout)
	if err != nil {
		return nil, CreateOutput{}, err
	}
	ready, poll, err := readiness(in.ReadyTimeoutSeconds, in.HealthCheckPollingIntervalMS)
	if err != nil {
		return nil, CreateOutput{}, err
	}
	osb := in.openSandbox()
	if timeout == 0 && s.opts.IdleTimeout > 0 {
		timeout = s.opts.IdleTimeout
	} else if timeout == 0 && osb {
		timeout = osbTimeout
	}
	c, err := s.client(ctx, req)
	if err != nil {
		return nil, CreateOutput{}, err
	}
	md := map[string]string{MetadataKey: "true"}
	maps.Copy(md, in.Metadata)
	opts := sdk.CreateOptions{Template: in.Template, Image: in.Image, Timeout: timeout, Envs: in.Envs, Metadata: md,
		AllowInternetAccess: in.Internet, Resources: in.Resource, Entrypoint: in.Entrypoint, Extensions: in.Extensions}
	if in.Env != nil {
		opts.Envs = in.Env
	}
	if in.AuthUsername != "" {
		opts.ImageAuth = &sdk.RegistryAuth{Username: in.AuthUsername, Password: in.AuthPassword}
	}
	if p := in.NetworkPolicy; p != nil {
		if opts.NetworkPolicy, err = networkPolicyOf(p); err != nil {
			return nil, CreateOutput{}, err
		}
	}
	sbx, err := c.Create(ctx, opts)
	lifecycle := in.Image != "" || in.Resource != nil || in.Entrypoint != nil || in.NetworkPolicy != nil || in.AuthUsername != "" || in.Extensions != nil
	if errors.Is(err, sdk.ErrNotFound) && lifecycle {
		return nil, CreateOutput{}, fmt.Errorf("%w (or this hutch serve does not answer OpenSandbox's lifecycle API, /v1, which image, resource, entrypoint and network_policy need)", err)
	}
	if err != nil {
		return nil, CreateOutput{}, err
	}
	if osb && (in.SkipHealthCheck == nil || !*in.SkipHealthCheck) {
		if err := awaitReady(ctx, sbx, ready, poll); err != nil {
			return nil, CreateOutput{}, err
		}
	}
	return s.describe(ctx, c, sbx.ID)
}

// readiness reads OpenSandbox's readiness arguments.
func readiness(timeoutSeconds float64, intervalMS int) (time.Duration, time.Duration, error) {
	ready, err := seconds("ready_timeout_seconds", timeoutSeconds, maxReadyTimeout)
	if err != nil {
		return 0, 0, err
	}
	if ready == 0 {
		ready = osbReadyTimeout
	}
	poll := time.Duration(intervalMS) * time.Millisecond
	switch {
	case intervalMS < 0 || poll > time.Minute:
		return 0, 0, fmt.Errorf("health_check_polling_interval_ms must be between 1 and 60000, got %d", intervalMS)
	case poll == 0:
		poll = osbPollInterval
	}
	return ready, poll, nil
}

// awaitReady waits until sbx's daemon answers, asking every poll for at
// most ready, as OpenSandbox's SDK does after a create or connect.
func awaitReady(ctx context.Context, sbx *sdk.Sandbox, ready, poll time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, ready)
	defer cancel()
	for {
		if ok, err := sbx.IsRunning(ctx); ok && err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sandbox %s did not answer within %v", sbx.ID, ready)
		case <-time.After(poll):
		}
	}
}

// networkPolicyOf checks OpenSandbox's network policy.
func networkPolicyOf(p *NetworkPolicyInput) (*sdk.NetworkPolicy, error) {
	if err := conflict("default_action", p.DefaultAction != "", "defaultAction", p.DefaultActionAlias != ""); err != nil {
		return nil, err
	}
	out := &sdk.NetworkPolicy{DefaultAction: p.DefaultAction + p.DefaultActionAlias}
	if out.DefaultAction == "" {
		out.DefaultAction = "deny"
	}
	if out.DefaultAction != "allow" && out.DefaultAction != "deny" {
		return nil, fmt.Errorf("network_policy.default_action must be allow or deny, got %q", out.DefaultAction)
	}
	for i, r := range p.Egress {
		if r.Action != "allow" && r.Action != "deny" {
			return nil, fmt.Errorf("network_policy.egress[%d].action must be allow or deny, got %q", i, r.Action)
		}
		if strings.TrimSpace(r.Target) == "" {
			return nil, fmt.Errorf("network_policy.egress[%d].target is empty", i)
		}
		out.Egress = append(out.Egress, sdk.NetworkRule{Action: r.Action, Target: r.Target})
	}
	return out, nil
}

// describe is the result of sandbox_create and sandbox_connect: the
// sandbox as E2B's API describes it (Hutch's fields) and as OpenSandbox's
// does (info: the image it was made from as its create named it, its
// entrypoint).
func (s *Server) describe(ctx context.Context, c *sdk.Client, id string) (*mcp.CallToolResult, CreateOutput, error) {
	info, err := c.GetInfo(ctx, id)
	if err != nil {
		return nil, CreateOutput{}, explain(err, id)
	}
	osb, err := openSandboxInfo(ctx, c, id)
	if err != nil {
		return nil, CreateOutput{}, err
	}
	return nil, CreateOutput{SandboxInfo: infoOf(info), Info: openSandboxOf(osb)}, nil
}

// ConnectInput is sandbox_connect's input.
type ConnectInput struct {
	SandboxID      string  `json:"sandbox_id" jsonschema:"the sandbox's id"`
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty" jsonschema:"keep the sandbox alive at least this long from now; default 300"`
	// OpenSandbox's.
	ConnectTimeoutSeconds        float64 `json:"connect_timeout_seconds,omitempty" jsonschema:"OpenSandbox's: how long to wait for the sandbox to answer; default 30. The call then leaves the sandbox's life as it was"`
	HealthCheckPollingIntervalMS int     `json:"health_check_polling_interval_ms,omitempty" jsonschema:"OpenSandbox's: how often to ask while waiting, in milliseconds; default 200"`
	SkipHealthCheck              *bool   `json:"skip_health_check,omitempty" jsonschema:"OpenSandbox's: true returns without waiting for the sandbox to answer"`
}

func (s *Server) connect(ctx context.Context, req *mcp.CallToolRequest, in ConnectInput) (*mcp.CallToolResult, CreateOutput, error) {
	osb := in.ConnectTimeoutSeconds != 0 || in.HealthCheckPollingIntervalMS != 0 || in.SkipHealthCheck != nil
	if osb && in.TimeoutSeconds != 0 {
		return nil, CreateOutput{}, errors.New("timeout_seconds (Hutch's: how long the sandbox lives on) and connect_timeout_seconds, health_check_polling_interval_ms, skip_health_check (OpenSandbox's: how long to wait for it) are two shapes of this call: give one")
	}
	ready, poll, err := readiness(in.ConnectTimeoutSeconds, in.HealthCheckPollingIntervalMS)
	if err != nil {
		return nil, CreateOutput{}, err
	}
	extend, err := seconds("timeout_seconds", in.TimeoutSeconds, MaxTimeout)
	if err != nil {
		return nil, CreateOutput{}, err
	}
	if osb {
		// OpenSandbox's connect leaves a life as it was: one second asks
		// for nothing.
		extend = time.Second
	}
	sbx, err := s.connectSandbox(ctx, req, in.SandboxID, extend, false)
	if err != nil {
		return nil, CreateOutput{}, err
	}
	if osb && (in.SkipHealthCheck == nil || !*in.SkipHealthCheck) {
		if err := awaitReady(ctx, sbx, ready, poll); err != nil {
			return nil, CreateOutput{}, err
		}
	}
	c, err := s.client(ctx, req)
	if err != nil {
		return nil, CreateOutput{}, err
	}
	return s.describe(ctx, c, sbx.ID)
}

// connectSandbox connects to sandbox id for sandbox_connect and
// sandbox_resume (which resumes a paused one; reboot boots it again on
// its files), keeping it alive at least timeout (0: the server's
// default) or the idle timeout from now.
func (s *Server) connectSandbox(ctx context.Context, req *mcp.CallToolRequest, id string, timeout time.Duration, reboot bool) (*sdk.Sandbox, error) {
	c, err := s.client(ctx, req)
	if err != nil {
		return nil, err
	}
	if id == "" {
		return nil, fmt.Errorf("sandbox_id is required")
	}
	sbx, err := c.Connect(ctx, id, sdk.ConnectOptions{Timeout: max(timeout, s.opts.IdleTimeout), Reboot: reboot})
	if err != nil {
		return nil, explain(err, id)
	}
	return sbx, nil
}

func (s *Server) kill(ctx context.Context, req *mcp.CallToolRequest, in SandboxRef) (*mcp.CallToolResult, KillOutput, error) {
	c, err := s.client(ctx, req)
	if err != nil {
		return nil, KillOutput{}, err
	}
	if err := c.Kill(ctx, in.SandboxID); err != nil {
		return nil, KillOutput{}, explain(err, in.SandboxID)
	}
	return nil, KillOutput{Killed: true, Status: "killed"}, nil
}

func (s *Server) getInfo(ctx context.Context, req *mcp.CallToolRequest, in SandboxRef) (*mcp.CallToolResult, GetInfoOutput, error) {
	c, err := s.client(ctx, req)
	if err != nil {
		return nil, GetInfoOutput{}, err
	}
	info, err := c.GetInfo(ctx, in.SandboxID)
	if err != nil {
		return nil, GetInfoOutput{}, explain(err, in.SandboxID)
	}
	osb, err := openSandboxInfo(ctx, c, in.SandboxID)
	if err != nil {
		return nil, GetInfoOutput{}, err
	}
	return nil, GetInfoOutput{SandboxInfo: infoOf(info), OpenSandboxFields: openSandboxOf(osb).OpenSandboxFields}, nil
}

func (s *Server) list(ctx context.Context, req *mcp.CallToolRequest, in ListInput) (*mcp.CallToolResult, any, error) {
	if f := in.Filter; f != nil {
		if in.Metadata != nil || in.State != nil {
			return nil, nil, errors.New("metadata and state (Hutch's) and filter (OpenSandbox's) are two shapes of this call: give one")
		}
		page, err := s.listPage(ctx, req, *f)
		if err != nil {
			return nil, nil, err
		}
		return nil, page, nil
	}
	c, err := s.client(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	for _, st := range in.State {
		if st != sdk.StateRunning && st != sdk.StatePaused {
			return nil, nil, fmt.Errorf("state must be running or paused, got %q", st)
		}
	}
	out := ListOutput{Sandboxes: []SandboxInfo{}}
	for info, err := range c.List(sdk.ListOptions{Metadata: in.Metadata, States: in.State}).All(ctx) {
		if err != nil {
			return nil, nil, err
		}
		out.Sandboxes = append(out.Sandboxes, infoOf(&info))
	}
	if in.Metadata != nil || in.State != nil {
		return nil, out, nil
	}
	// Neither shape's arguments: OpenSandbox's first page too.
	page, err := s.listPage(ctx, req, SandboxFilter{})
	if err != nil {
		return nil, nil, err
	}
	merged, err := both(out, page)
	if err != nil {
		return nil, nil, err
	}
	return nil, merged, nil
}

// listPage answers OpenSandbox's sandbox_list: one page of the listing
// of OpenSandbox's lifecycle API, with the totals.
func (s *Server) listPage(ctx context.Context, req *mcp.CallToolRequest, f SandboxFilter) (PagedSandboxInfos, error) {
	switch {
	case f.Page < 0:
		return PagedSandboxInfos{}, fmt.Errorf("filter.page counts from 1, got %d", f.Page)
	case f.PageSize < 0:
		return PagedSandboxInfos{}, fmt.Errorf("filter.page_size must be at least 1, got %d", f.PageSize)
	}
	for _, st := range f.States {
		switch strings.ToLower(st) {
		// OpenSandbox's passing states (pending, …) are states: no
		// sandbox Hutch lists is in one, so they match nothing.
		case "running", "paused", "pending", "pausing", "resuming", "stopping", "terminated", "failed":
		default:
			return PagedSandboxInfos{}, fmt.Errorf("filter.states: %q is not a state (Running, Paused, Pending, Pausing, Resuming, Stopping, Terminated, Failed)", st)
		}
	}
	c, err := s.client(ctx, req)
	if err != nil {
		return PagedSandboxInfos{}, err
	}
	page, err := c.ListOpenSandboxInfo(ctx, sdk.OpenSandboxListOptions{States: f.States, Metadata: f.Metadata, Page: f.Page, PageSize: f.PageSize})
	switch {
	case errors.Is(err, sdk.ErrInvalidArgument):
		return PagedSandboxInfos{}, fmt.Errorf("filter: %w", err)
	case errors.Is(err, sdk.ErrNotFound):
		return PagedSandboxInfos{}, fmt.Errorf("%w (this hutch serve does not answer OpenSandbox's lifecycle API, /v1, which filter needs)", err)
	case err != nil:
		return PagedSandboxInfos{}, err
	}
	out := PagedSandboxInfos{SandboxInfos: []OpenSandboxInfo{}, Pagination: Pagination{Page: page.Page, PageSize: page.PageSize,
		TotalItems: page.TotalItems, TotalPages: page.TotalPages, HasNextPage: page.HasNextPage}}
	for _, i := range page.Items {
		out.SandboxInfos = append(out.SandboxInfos, openSandboxOf(&i))
	}
	return out, nil
}

func (s *Server) renew(ctx context.Context, req *mcp.CallToolRequest, in RenewInput) (*mcp.CallToolResult, RenewOutput, error) {
	c, err := s.client(ctx, req)
	if err != nil {
		return nil, RenewOutput{}, err
	}
	timeout, err := seconds("timeout_seconds", in.TimeoutSeconds, MaxTimeout)
	if err != nil || timeout < time.Second {
		return nil, RenewOutput{}, fmt.Errorf("timeout_seconds must be between 1 and %d, got %v", int(MaxTimeout/time.Second), in.TimeoutSeconds)
	}
	if err := c.SetTimeout(ctx, in.SandboxID, timeout); err != nil {
		return nil, RenewOutput{}, explain(err, in.SandboxID)
	}
	info, err := c.GetInfo(ctx, in.SandboxID)
	if err != nil {
		return nil, RenewOutput{}, explain(err, in.SandboxID)
	}
	return nil, RenewOutput{SandboxInfo: infoOf(info), ExpiresAt: info.EndAt}, nil
}

func (s *Server) health(ctx context.Context, req *mcp.CallToolRequest, in ProbeInput) (*mcp.CallToolResult, HealthOutput, error) {
	sbx, err := s.sandbox(ctx, req, in.SandboxID)
	if err != nil {
		return nil, HealthOutput{}, err
	}
	ok, err := sbx.IsRunning(ctx)
	if err != nil {
		return nil, HealthOutput{}, opFailed(err, in.SandboxID)
	}
	return nil, HealthOutput{Running: ok, SandboxID: in.SandboxID, Healthy: ok}, nil
}

func (s *Server) metrics(ctx context.Context, req *mcp.CallToolRequest, in ProbeInput) (*mcp.CallToolResult, MetricsOutput, error) {
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
	if n := len(ms); n > 0 {
		m := ms[n-1]
		out.CPUCount, out.CPUUsedPercentage = ptr(float64(m.CPUCount)), ptr(m.CPUUsedPct)
		out.MemoryTotalInMiB, out.MemoryUsedInMiB = ptr(float64(m.MemTotal)/mb), ptr(float64(m.MemUsed)/mb)
		out.Timestamp = ptr(m.Timestamp.UnixMilli())
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
	c, err := s.client(ctx, req)
	if err != nil {
		return nil, EndpointOutput{}, err
	}
	// OpenSandbox's endpoint, for every port: what its clients know how
	// to use (execd's port among them, which only this route serves),
	// and what Hutch's clients can use as well.
	ep, err := c.GetOpenSandboxEndpoint(ctx, in.SandboxID, in.Port)
	if errors.Is(err, sdk.ErrNotFound) {
		err = fmt.Errorf("%w (killed just now, or this hutch serve does not answer OpenSandbox's lifecycle API, /v1, which hands out endpoints)", err)
	}
	if err != nil {
		return nil, EndpointOutput{}, opFailed(err, in.SandboxID)
	}
	scheme := "http"
	if u, err := url.Parse(c.Config().APIURL); err == nil && u.Scheme != "" {
		scheme = u.Scheme
	}
	out := EndpointOutput{URL: scheme + "://" + ep.Endpoint + "/", Headers: ep.Headers, Endpoint: ep.Endpoint, Origin: ep.Origin}
	if sbx.Domain != "" {
		out.Host = sbx.Host(in.Port)
	}
	return nil, out, nil
}
