package e2bapi

import "encoding/json"

// Server-side defaults and limits of the request bodies. The spec fixes the
// defaults; it says nothing about maxima, so these are Hutch's choices.
const (
	// DefaultTemplateID is the template used when a create request has an
	// empty or missing templateID (the SDKs' own default).
	DefaultTemplateID = "base"
	// DefaultTimeoutV2 is the sandbox lifetime, in seconds, of a
	// POST /v2/sandboxes without a timeout, and of a connect without one.
	DefaultTimeoutV2 int32 = 300
	// DefaultTimeoutV1 is the sandbox lifetime, in seconds, of a v1
	// POST /sandboxes without a timeout (the spec's default; Python always
	// sends one).
	DefaultTimeoutV1 int32 = 15
	// MaxTimeout is the longest lifetime, in seconds, a create, connect,
	// resume or setTimeout may ask for: 24 hours. Longer is a 400.
	MaxTimeout int32 = 24 * 60 * 60
	// MaxRefreshDuration is the largest duration, in seconds, of
	// POST /sandboxes/{id}/refreshes (the spec's maximum).
	MaxRefreshDuration int32 = 3600
)

// NewSandboxV2 is the body of POST /v2/sandboxes (spec §2.4). The JS SDK
// omits every field whose option is unset, so pointers distinguish "absent"
// from the zero value. Hutch stores but does not act on every field (IAM,
// MCP are opaque here); unknown fields are ignored by [DecodeJSON].
// Call [NewSandboxV2.Normalize] after decoding.
type NewSandboxV2 struct {
	// TemplateID names the template: a name, name:tag, team/name or an ID.
	// Empty means [DefaultTemplateID].
	TemplateID string `json:"templateID"`
	// Timeout is the lifetime in seconds; nil means [DefaultTimeoutV2].
	Timeout *int32 `json:"timeout,omitempty"`
	// Metadata is returned by getInfo and list and matched by list filters.
	Metadata map[string]string `json:"metadata,omitempty"`
	// EnvVars is the default environment of every command in the sandbox.
	EnvVars map[string]string `json:"envVars,omitempty"`
	// AllowInternetAccess is the one snake_case field of the API. nil means
	// allowed; false is the same as Network.DenyOut = ["0.0.0.0/0"].
	AllowInternetAccess *bool `json:"allow_internet_access,omitempty"`
	// Network is the egress/ingress configuration; nil means defaults.
	Network *NetworkConfig `json:"network,omitempty"`
	// AutoPause is true for lifecycle.onTimeout "pause", false for "kill",
	// nil when the SDK's lifecycle option is unset (kill).
	AutoPause *bool `json:"autoPause,omitempty"`
	// AutoPauseMemory is lifecycle.onTimeout.keepMemory, sent only with
	// action "pause".
	AutoPauseMemory *bool `json:"autoPauseMemory,omitempty"`
	// AutoResume is lifecycle.autoResume, sent only when set.
	AutoResume *AutoResume `json:"autoResume,omitempty"`
	// MCP is the MCP gateway configuration, kept verbatim (the SDK itself
	// starts the gateway inside the sandbox).
	MCP json.RawMessage `json:"mcp,omitempty"`
	// VolumeMounts names the key's volumes to mount, by name, each at
	// its path.
	VolumeMounts []VolumeMount `json:"volumeMounts,omitempty"`
	// IAM is {tokens:{name:{audience, tokenType}}}, kept verbatim.
	IAM json.RawMessage `json:"iam,omitempty"`
}

// NewSandboxV1 is the body of the v1 POST /sandboxes (Python 2.45.1, JS ≤
// 2.45): the v2 fields plus Secure, with a 15 s default timeout. Call
// [NewSandboxV1.Normalize] after decoding.
type NewSandboxV1 struct {
	NewSandboxV2
	// Secure asks for an envdAccessToken. nil counts as false, as in the
	// reference server (Python and old JS always send true): a client that
	// did not ask for a token does not send one, so envd must not require
	// it.
	Secure *bool `json:"secure,omitempty"`
}

// NetworkConfig is the network object of a create request, and of
// SandboxDetail (there with the egress proxy's password removed, see
// [NetworkConfig.Redacted]).
type NetworkConfig struct {
	// AllowOut lists IPs, CIDRs or hosts that may be reached even when
	// DenyOut blocks them; "0.0.0.0/0" means all traffic.
	AllowOut []string `json:"allowOut,omitempty"`
	// DenyOut lists IPs or CIDRs that may not be reached.
	DenyOut []string `json:"denyOut,omitempty"`
	// AllowPublicTraffic nil means true. False requires the
	// e2b-traffic-access-token header on requests to the sandbox's ports.
	AllowPublicTraffic *bool `json:"allowPublicTraffic,omitempty"`
	// MaskRequestHost rewrites the Host header of requests to the sandbox,
	// with ${PORT} substituted.
	MaskRequestHost *string `json:"maskRequestHost,omitempty"`
	// HTTPSPorts lists sandbox ports served over TLS.
	HTTPSPorts []int `json:"httpsPorts,omitempty"`
	// Rules is {host: [{transform:{headers{}}}]}, kept verbatim.
	Rules json.RawMessage `json:"rules,omitempty"`
	// EgressProxy is {address, username?, password?}, kept verbatim.
	EgressProxy json.RawMessage `json:"egressProxy,omitempty"`
}

// AutoResume is the autoResume object of a create request.
type AutoResume struct {
	// Enabled resumes a paused sandbox on incoming traffic.
	Enabled bool `json:"enabled"`
}

// VolumeMount is one entry of volumeMounts, in requests and listings.
type VolumeMount struct {
	// Name is the volume's name.
	Name string `json:"name"`
	// Path is the mount point inside the sandbox.
	Path string `json:"path"`
}

// ConnectRequest is the body of POST /v2/sandboxes/{id}/connect and of the
// v1 POST /sandboxes/{id}/connect. The JS SDK may send {}.
type ConnectRequest struct {
	// Timeout in seconds; nil means [DefaultTimeoutV2]. A running sandbox's
	// expiry only moves later, never earlier.
	Timeout *int32 `json:"timeout,omitempty"`
	// Memory false asks for a cold boot when resuming (onResume: 'reboot');
	// nil means true.
	Memory *bool `json:"memory,omitempty"`
}

// ResumeRequest is the body of the deprecated POST /sandboxes/{id}/resume.
type ResumeRequest struct {
	// Timeout in seconds; nil means [DefaultTimeoutV2].
	Timeout *int32 `json:"timeout,omitempty"`
	// AutoPause replaces the sandbox's onTimeout action when set.
	AutoPause *bool `json:"autoPause,omitempty"`
	// Memory false asks for a cold boot; nil means true.
	Memory *bool `json:"memory,omitempty"`
}

// PauseRequest is the body of POST /sandboxes/{id}/pause: {} or
// {"memory": bool}.
type PauseRequest struct {
	// Memory false pauses without keeping memory; nil means true.
	Memory *bool `json:"memory,omitempty"`
}

// TimeoutRequest is the body of POST /sandboxes/{id}/timeout. Timeout is
// required: decoding a body without it (or with null) fails with a 400.
type TimeoutRequest struct {
	// Timeout is the new lifetime in seconds, counted from now.
	Timeout int32 `json:"timeout"`
}

// UnmarshalJSON decodes the body and rejects a missing or null timeout.
func (t *TimeoutRequest) UnmarshalJSON(b []byte) error {
	var raw struct {
		Timeout *int32 `json:"timeout"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	if raw.Timeout == nil {
		return BadRequest("timeout: required (an integer number of seconds)")
	}
	t.Timeout = *raw.Timeout
	return nil
}

// UnmarshalJSON decodes the v2 fields and secure. It exists so that errors
// name JSON fields only ("timeout", not the embedded Go type's name).
func (r *NewSandboxV1) UnmarshalJSON(b []byte) error {
	var v2 NewSandboxV2
	if err := json.Unmarshal(b, &v2); err != nil {
		return err
	}
	var v1 struct {
		Secure *bool `json:"secure"`
	}
	if err := json.Unmarshal(b, &v1); err != nil {
		return err
	}
	r.NewSandboxV2, r.Secure = v2, v1.Secure
	return nil
}

// RefreshRequest is the body of the deprecated POST
// /sandboxes/{id}/refreshes.
type RefreshRequest struct {
	// Duration in seconds; nil means [DefaultTimeoutV2].
	Duration *int32 `json:"duration,omitempty"`
}

// Normalize fills in the server-side defaults (templateID
// [DefaultTemplateID], timeout [DefaultTimeoutV2]) and validates the
// request. Its error is a [*StatusError] with status 400 whose message names
// the offending field.
func (r *NewSandboxV2) Normalize() error {
	if r.Timeout == nil {
		t := DefaultTimeoutV2
		r.Timeout = &t
	}
	return r.normalize()
}

func (r *NewSandboxV2) normalize() error {
	if r.TemplateID == "" {
		r.TemplateID = DefaultTemplateID
	}
	if err := ValidateTemplateID(r.TemplateID); err != nil {
		return err
	}
	if err := ValidateTimeout("timeout", *r.Timeout); err != nil {
		return err
	}
	if err := ValidateMetadata(r.Metadata); err != nil {
		return err
	}
	if err := ValidateEnvVars(r.EnvVars); err != nil {
		return err
	}
	if r.Network != nil {
		if err := r.Network.Validate(); err != nil {
			return err
		}
	}
	for i, m := range r.VolumeMounts {
		if m.Name == "" || m.Path == "" {
			return BadRequestf("volumeMounts[%d]: name and path are required", i)
		}
	}
	return nil
}

// InternetAccess reports whether the sandbox may reach the internet:
// allow_internet_access absent or true.
func (r *NewSandboxV2) InternetAccess() bool {
	return r.AllowInternetAccess == nil || *r.AllowInternetAccess
}

// Normalize fills in the v1 defaults (timeout [DefaultTimeoutV1], templateID
// [DefaultTemplateID]) and validates the request like
// [NewSandboxV2.Normalize].
func (r *NewSandboxV1) Normalize() error {
	if r.Timeout == nil {
		t := DefaultTimeoutV1
		r.Timeout = &t
	}
	return r.normalize()
}

// IsSecure reports whether the client asked for an envdAccessToken.
func (r *NewSandboxV1) IsSecure() bool { return r.Secure != nil && *r.Secure }

// Validate checks the optional timeout.
func (r *ConnectRequest) Validate() error {
	if r.Timeout == nil {
		return nil
	}
	return ValidateTimeout("timeout", *r.Timeout)
}

// TimeoutSeconds is the requested timeout, or [DefaultTimeoutV2].
func (r *ConnectRequest) TimeoutSeconds() int32 { return orDefault(r.Timeout, DefaultTimeoutV2) }

// Validate checks the optional timeout.
func (r *ResumeRequest) Validate() error {
	if r.Timeout == nil {
		return nil
	}
	return ValidateTimeout("timeout", *r.Timeout)
}

// TimeoutSeconds is the requested timeout, or [DefaultTimeoutV2].
func (r *ResumeRequest) TimeoutSeconds() int32 { return orDefault(r.Timeout, DefaultTimeoutV2) }

// Validate checks the timeout's range.
func (r *TimeoutRequest) Validate() error { return ValidateTimeout("timeout", r.Timeout) }

// Validate checks that the optional duration lies in 0..[MaxRefreshDuration].
func (r *RefreshRequest) Validate() error {
	if r.Duration == nil {
		return nil
	}
	d := *r.Duration
	if d < 0 || d > MaxRefreshDuration {
		return BadRequestf("duration: must be between 0 and %d seconds, got %d", MaxRefreshDuration, d)
	}
	return nil
}

// DurationSeconds is the requested duration, or [DefaultTimeoutV2].
func (r *RefreshRequest) DurationSeconds() int32 { return orDefault(r.Duration, DefaultTimeoutV2) }

func orDefault(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

// Validate accepts every pause body: {} and {"memory": bool}.
func (r *PauseRequest) Validate() error { return nil }

// SnapshotRequest is the body of POST /sandboxes/{id}/snapshots: {} or
// {"name": "..."}.
type SnapshotRequest struct {
	// Name names the snapshot; nil or "" lets the server pick one.
	Name *string `json:"name,omitempty"`
	// TTL is Hutch's own: the snapshot's retention in seconds (nil: the
	// server's default). E2B's SDKs do not send it.
	TTL *int64 `json:"ttl,omitempty"`
}

// Validate checks the retention.
func (r *SnapshotRequest) Validate() error {
	if r.TTL != nil && *r.TTL < 0 {
		return BadRequest("ttl must not be negative")
	}
	return nil
}

// ForkRequest is the body of POST /sandboxes/{id}/fork.
type ForkRequest struct {
	// Timeout of each fork in seconds; nil means [DefaultTimeoutV2].
	Timeout *int32 `json:"timeout,omitempty"`
	// Count is how many forks to make; nil means 1.
	Count *int `json:"count,omitempty"`
}

// Validate checks the timeout.
func (r *ForkRequest) Validate() error {
	if r.Timeout == nil {
		return nil
	}
	return ValidateTimeout("timeout", *r.Timeout)
}

// TimeoutSeconds is the forks' timeout with the default applied.
func (r *ForkRequest) TimeoutSeconds() int32 { return orDefault(r.Timeout, DefaultTimeoutV2) }

// CountOrDefault is the fork count with the default (1) applied.
func (r *ForkRequest) CountOrDefault() int {
	if r.Count == nil {
		return 1
	}
	return *r.Count
}
