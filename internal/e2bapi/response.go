package e2bapi

import (
	"bytes"
	"encoding/json"
	"time"
)

// ClientID is the value of the deprecated clientID field. The reference
// server always returns this constant, and the Python SDK raises KeyError
// without the field.
const ClientID = "6532622b"

// Sandbox states as they appear in listings and the state filter.
const (
	// StateRunning is a live sandbox.
	StateRunning = "running"
	// StatePaused is a paused sandbox, resumed by connect.
	StatePaused = "paused"
)

// Lifecycle onTimeout actions.
const (
	// OnTimeoutKill kills the sandbox at expiry (autoPause false or absent).
	OnTimeoutKill = "kill"
	// OnTimeoutPause pauses the sandbox at expiry (autoPause true).
	OnTimeoutPause = "pause"
)

// Response headers of the listing endpoints.
const (
	// HeaderNextToken carries the cursor of the next page; it must be absent
	// on the last page (the SDK's paginator tests its presence).
	HeaderNextToken = "X-Next-Token"
	// HeaderTotalRunning optionally carries the number of running sandboxes.
	HeaderTotalRunning = "X-Total-Running"
)

// Time is a time.Time that marshals as RFC 3339 in UTC with a "Z" and
// nanoseconds when there are any (time.RFC3339Nano), as the reference
// server does, whatever the location of the value. It unmarshals any RFC
// 3339 time. Convert with Time(t) and time.Time(x).
type Time time.Time

// MarshalJSON writes the time as a quoted UTC RFC 3339 string.
func (t Time) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, len(time.RFC3339Nano)+2)
	b = append(b, '"')
	b = time.Time(t).UTC().AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), nil
}

// UnmarshalJSON reads a quoted RFC 3339 time.
func (t *Time) UnmarshalJSON(b []byte) error {
	var tt time.Time
	if err := tt.UnmarshalJSON(b); err != nil {
		return err
	}
	*t = Time(tt)
	return nil
}

// String formats like MarshalJSON, without quotes.
func (t Time) String() string { return time.Time(t).UTC().Format(time.RFC3339Nano) }

// Sandbox is the answer to create, connect, resume and each fork item
// (spec §2.5). sandboxID, templateID, clientID and envdVersion are always
// present.
type Sandbox struct {
	// SandboxID is the ID, [a-z0-9]+.
	SandboxID string `json:"sandboxID"`
	// TemplateID is the template the sandbox was made from.
	TemplateID string `json:"templateID"`
	// ClientID is deprecated; set it to [ClientID].
	ClientID string `json:"clientID"`
	// EnvdVersion is a semver the SDKs gate features on (spec §3.10); Hutch
	// reports envdapi.Version. Below 0.1.0 the SDK kills the sandbox.
	EnvdVersion string `json:"envdVersion"`
	// EnvdAccessToken is sent as X-Access-Token to envd and keys signed file
	// URLs. Empty (omitted) only for a v1 create without secure: true.
	EnvdAccessToken string `json:"envdAccessToken,omitempty"`
	// TrafficAccessToken guards the sandbox's ports when public traffic is
	// off; null otherwise.
	TrafficAccessToken *string `json:"trafficAccessToken"`
	// Domain is the sandbox domain for URLs when E2B_SANDBOX_URL is unset;
	// null when there is none.
	Domain *string `json:"domain"`
	// Alias is the template's alias, if any.
	Alias string `json:"alias,omitempty"`
}

// ListedSandbox is one element of the GET /v2/sandboxes (and legacy GET
// /sandboxes) array. Every field without omitempty is required by the spec
// and is always present, even when zero.
type ListedSandbox struct {
	// TemplateID is the template the sandbox was made from.
	TemplateID string `json:"templateID"`
	// Alias is the template's alias (the JS SDK's "name").
	Alias string `json:"alias,omitempty"`
	// SandboxID is the ID.
	SandboxID string `json:"sandboxID"`
	// ClientID is deprecated; set it to [ClientID].
	ClientID string `json:"clientID"`
	// StartedAt is when the sandbox was created.
	StartedAt Time `json:"startedAt"`
	// EndAt is when it will expire.
	EndAt Time `json:"endAt"`
	// CPUCount is the number of vCPUs.
	CPUCount int32 `json:"cpuCount"`
	// MemoryMB is the memory limit in MiB.
	MemoryMB int32 `json:"memoryMB"`
	// DiskSizeMB is the disk size in MiB.
	DiskSizeMB int32 `json:"diskSizeMB"`
	// Metadata is the create request's metadata.
	Metadata map[string]string `json:"metadata,omitempty"`
	// State is [StateRunning] or [StatePaused].
	State string `json:"state"`
	// EnvdVersion is as in [Sandbox].
	EnvdVersion string `json:"envdVersion"`
	// VolumeMounts are the create request's volume mounts.
	VolumeMounts []VolumeMount `json:"volumeMounts,omitempty"`
}

// SandboxDetail is the answer of GET /sandboxes/{id}: the listing fields
// plus connection and configuration details.
type SandboxDetail struct {
	ListedSandbox
	// EnvdAccessToken is as in [Sandbox].
	EnvdAccessToken string `json:"envdAccessToken,omitempty"`
	// Domain is as in [Sandbox]; omitted when nil.
	Domain *string `json:"domain,omitempty"`
	// AllowInternetAccess is camelCase here (snake_case in the create
	// request); omitted when nil.
	AllowInternetAccess *bool `json:"allowInternetAccess,omitempty"`
	// Network is the create request's network configuration; use
	// [NetworkConfig.Redacted] to drop the egress proxy's password.
	Network *NetworkConfig `json:"network,omitempty"`
	// Lifecycle is what happens at expiry and on traffic to a paused
	// sandbox.
	Lifecycle *Lifecycle `json:"lifecycle,omitempty"`
}

// Lifecycle is the lifecycle object of [SandboxDetail]; both fields are
// required when it is present.
type Lifecycle struct {
	// OnTimeout is [OnTimeoutKill] or [OnTimeoutPause].
	OnTimeout string `json:"onTimeout"`
	// AutoResume resumes a paused sandbox on traffic.
	AutoResume bool `json:"autoResume"`
}

// TemplateAliasResponse is the body of GET /templates/aliases/{alias}
// (200): the template the alias names. The SDKs' Template.exists reads only
// the status (200 or 403: it exists; 404: it does not).
type TemplateAliasResponse struct {
	// Public is true for a template every team may use; all of a Hutch
	// server's templates are usable by every API key.
	Public bool `json:"public"`
	// TemplateID identifies the template (create's templateID).
	TemplateID string `json:"templateID"`
}

// SandboxMetric is one element of GET /sandboxes/{id}/metrics. Every field
// is required and always present. Timestamp and TimestampUnix must describe
// the same instant; [NewSandboxMetric] sets both.
type SandboxMetric struct {
	// Timestamp is the sample time.
	Timestamp Time `json:"timestamp"`
	// TimestampUnix is the sample time in Unix seconds.
	TimestampUnix int64 `json:"timestampUnix"`
	// CPUCount is the number of vCPUs.
	CPUCount int32 `json:"cpuCount"`
	// CPUUsedPct is the CPU use in percent.
	CPUUsedPct float32 `json:"cpuUsedPct"`
	// MemUsed is memory used, in bytes.
	MemUsed int64 `json:"memUsed"`
	// MemTotal is the memory limit, in bytes.
	MemTotal int64 `json:"memTotal"`
	// MemCache is page cache, in bytes.
	MemCache int64 `json:"memCache"`
	// DiskUsed is disk used, in bytes.
	DiskUsed int64 `json:"diskUsed"`
	// DiskTotal is the disk size, in bytes.
	DiskTotal int64 `json:"diskTotal"`
}

// NewSandboxMetric returns a metric sampled at t, with Timestamp and
// TimestampUnix set from it; the caller fills in the measurements.
func NewSandboxMetric(t time.Time) SandboxMetric {
	return SandboxMetric{Timestamp: Time(t), TimestampUnix: t.Unix()}
}

// Redacted returns a copy of n, safe to show in SandboxDetail: the egress
// proxy without its password (spec §2.5). If egressProxy is not a JSON
// object it is dropped. A nil n gives nil. n itself is not modified.
func (n *NetworkConfig) Redacted() *NetworkConfig {
	if n == nil {
		return nil
	}
	c := *n
	if len(bytes.TrimSpace(n.EgressProxy)) == 0 || bytes.Equal(bytes.TrimSpace(n.EgressProxy), []byte("null")) {
		return &c
	}
	var proxy map[string]json.RawMessage
	if err := json.Unmarshal(n.EgressProxy, &proxy); err != nil || proxy == nil {
		c.EgressProxy = nil
		return &c
	}
	delete(proxy, "password")
	b, err := json.Marshal(proxy)
	if err != nil {
		c.EgressProxy = nil
		return &c
	}
	c.EgressProxy = b
	return &c
}

// SnapshotInfo is a snapshot in the answer to POST
// /sandboxes/{id}/snapshots (201) and in GET /snapshots.
type SnapshotInfo struct {
	// SnapshotID is what creates a sandbox from it (templateID) and
	// deletes it (DELETE /templates/{id}).
	SnapshotID string `json:"snapshotID"`
	// Names are the snapshot's "name:tag" refs.
	Names []string `json:"names"`
}

// ForkResult is one item of the answer to POST /sandboxes/{id}/fork:
// the fork's sandbox, or the error that kept it from being made.
type ForkResult struct {
	Sandbox *Sandbox `json:"sandbox,omitempty"`
	Error   *Error   `json:"error,omitempty"`
}
