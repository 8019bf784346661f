package osbapi

import "time"

// MinTimeout and MaxTimeout bound a create's timeout, in seconds: the
// spec's minimum, and Hutch's longest life (E2B's too) — a create without
// a timeout gets MaxTimeout, renewable, since every Hutch sandbox ends.
const (
	MinTimeout = 60
	MaxTimeout = 24 * 60 * 60
)

// ExecdPort and EgressPort are the ports OpenSandbox's SDKs ask endpoints
// for: its in-sandbox API (execd) and its egress sidecar.
const (
	ExecdPort  = 44772
	EgressPort = 18080
)

// HeaderAPIKey carries the API key; HeaderExecdToken the access token of
// one sandbox's execd (an endpoint's header).
const (
	HeaderAPIKey     = "OPEN-SANDBOX-API-KEY"
	HeaderExecdToken = "X-EXECD-ACCESS-TOKEN"
)

// CreateSandboxRequest is POST /sandboxes's body.
type CreateSandboxRequest struct {
	Image          *ImageSpec        `json:"image,omitempty"`
	SnapshotID     string            `json:"snapshotId,omitempty"`
	Platform       *PlatformSpec     `json:"platform,omitempty"`
	Timeout        *int64            `json:"timeout"`
	ResourceLimits map[string]string `json:"resourceLimits,omitempty"`
	// ResourceRequests are Kubernetes' reservations: accepted and not
	// used (Hutch's limits are caps only).
	ResourceRequests map[string]string `json:"resourceRequests,omitempty"`
	Env              map[string]string `json:"env,omitempty"`
	Metadata         map[string]string `json:"metadata,omitempty"`
	Entrypoint       []string          `json:"entrypoint,omitempty"`
	NetworkPolicy    *NetworkPolicy    `json:"networkPolicy,omitempty"`
	SecureAccess     bool              `json:"secureAccess,omitempty"`
	Extensions       map[string]string `json:"extensions,omitempty"`
	// Volumes, Lifecycle and CredentialProxy are kept raw: Hutch refuses
	// a request that sets them (see the server's checks).
	Volumes         []any `json:"volumes,omitempty"`
	Lifecycle       any   `json:"lifecycle,omitempty"`
	CredentialProxy *struct {
		Enabled bool `json:"enabled"`
	} `json:"credentialProxy,omitempty"`
}

// ImageSpec names a container image, with its registry's credentials.
type ImageSpec struct {
	URI  string     `json:"uri"`
	Auth *ImageAuth `json:"auth,omitempty"`
}

// ImageAuth authenticates to an image's registry.
type ImageAuth struct {
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
}

// PlatformSpec is an OS and CPU architecture constraint.
type PlatformSpec struct {
	OS   string `json:"os"`
	Arch string `json:"arch"`
}

// NetworkPolicy is an egress policy: rules in order, then DefaultAction.
type NetworkPolicy struct {
	DefaultAction string        `json:"defaultAction,omitempty"`
	Egress        []NetworkRule `json:"egress,omitempty"`
}

// NetworkRule allows or denies one target: a domain, "*.domain", or (in
// Hutch) an IPv4 address or range.
type NetworkRule struct {
	Action string `json:"action"`
	Target string `json:"target"`
}

// Sandbox is a sandbox as GET /sandboxes/{id} and the list answer it.
type Sandbox struct {
	ID         string            `json:"id"`
	Image      *ImageSpec        `json:"image,omitempty"`
	SnapshotID string            `json:"snapshotId,omitempty"`
	Status     SandboxStatus     `json:"status"`
	Metadata   map[string]string `json:"metadata"`
	Entrypoint []string          `json:"entrypoint"`
	ExpiresAt  *time.Time        `json:"expiresAt,omitempty"`
	CreatedAt  time.Time         `json:"createdAt"`
}

// CreateSandboxResponse is POST /sandboxes's answer (202).
type CreateSandboxResponse struct {
	ID         string            `json:"id"`
	Status     SandboxStatus     `json:"status"`
	Metadata   map[string]string `json:"metadata"`
	Entrypoint []string          `json:"entrypoint"`
	ExpiresAt  *time.Time        `json:"expiresAt,omitempty"`
	CreatedAt  time.Time         `json:"createdAt"`
}

// SandboxStatus is a sandbox's state and why.
type SandboxStatus struct {
	State            string     `json:"state"`
	Reason           string     `json:"reason,omitempty"`
	Message          string     `json:"message,omitempty"`
	LastTransitionAt *time.Time `json:"lastTransitionAt,omitempty"`
}

// Sandbox states Hutch reports.
const (
	StateRunning    = "Running"
	StatePaused     = "Paused"
	StateTerminated = "Terminated"
)

// ListSandboxesResponse is GET /sandboxes's answer.
type ListSandboxesResponse struct {
	Items      []Sandbox      `json:"items"`
	Pagination PaginationInfo `json:"pagination"`
}

// PaginationInfo says where a page is.
type PaginationInfo struct {
	Page        int  `json:"page"`
	PageSize    int  `json:"pageSize"`
	TotalItems  int  `json:"totalItems"`
	TotalPages  int  `json:"totalPages"`
	HasNextPage bool `json:"hasNextPage"`
}

// RenewSandboxExpirationRequest and RenewSandboxExpirationResponse are
// POST /sandboxes/{id}/renew-expiration's body and answer.
type RenewSandboxExpirationRequest struct {
	ExpiresAt time.Time `json:"expiresAt"`
}

// RenewSandboxExpirationResponse is the new expiry.
type RenewSandboxExpirationResponse struct {
	ExpiresAt time.Time `json:"expiresAt"`
}

// Endpoint is where a sandbox's port is reached, and the headers every
// request to it must carry.
type Endpoint struct {
	Endpoint string            `json:"endpoint"`
	Headers  map[string]string `json:"headers,omitempty"`
}

// CreateSnapshotRequest is POST /sandboxes/{id}/snapshots's body.
type CreateSnapshotRequest struct {
	Name string `json:"name,omitempty"`
}

// Snapshot is a persistent capture of a sandbox.
type Snapshot struct {
	ID        string         `json:"id"`
	SandboxID string         `json:"sandboxId"`
	Name      string         `json:"name,omitempty"`
	Status    SnapshotStatus `json:"status"`
	CreatedAt time.Time      `json:"createdAt"`
}

// SnapshotStatus is a snapshot's state.
type SnapshotStatus struct {
	State string `json:"state"`
}

// ListSnapshotsResponse is GET /snapshots's answer.
type ListSnapshotsResponse struct {
	Items      []Snapshot     `json:"items"`
	Pagination PaginationInfo `json:"pagination"`
}

// PolicyStatusResponse is the answer of the networkpolicy calls: the
// policy in force.
type PolicyStatusResponse struct {
	Status string         `json:"status"`
	Mode   string         `json:"mode,omitempty"`
	Policy *NetworkPolicy `json:"policy"`
}

// HeaderOrigin tells the SDKs what backs a sandbox; "template" means no
// egress sidecar in the sandbox, so that they send policy calls to the
// lifecycle API's networkpolicy route instead.
const (
	HeaderOrigin   = "OPEN-SANDBOX-ORIGIN"
	OriginTemplate = "template"
)
