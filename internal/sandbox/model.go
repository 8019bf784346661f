package sandbox

import (
	"encoding/json"
	"time"

	"github.com/hutch-sandbox/hutch/internal/store"
)

// This file is what a sandbox is, in Hutch's terms. Protocol adapters
// (internal/server for E2B's API) translate their wire to and from these
// types; nothing here knows a wire's field names, and the store's record is
// this package's private detail.

// State is where a sandbox is in its life.
type State string

// The states of a sandbox.
const (
	// StateRunning is a sandbox whose processes run.
	StateRunning State = "running"
	// StatePaused is a sandbox kept to be resumed.
	StatePaused State = "paused"
)

// Limits are the resources a sandbox was granted.
type Limits struct {
	// CPUs is the quota in whole cores, rounded up (what E2B reports);
	// CPUMillis is the exact quota in thousandths of a core when the
	// sandbox asked for its own (Resources), else 0.
	CPUs      int
	CPUMillis int
	MemoryMB  int
	DiskMB    int
}

// Resources are the CPU and memory a create asks for, in place of the
// server's defaults; a zero field keeps the default.
type Resources struct {
	CPUMillis int // thousandths of a core: 500 is half a core
	MemoryMB  int
}

// IsZero reports whether r asks for nothing of its own.
func (r Resources) IsZero() bool { return r == Resources{} }

// Network is a sandbox's network policy.
type Network struct {
	// Internet says whether the sandbox may reach beyond itself; nil is
	// the default, yes. Kept as given, so that a client can tell "not said"
	// from "yes".
	Internet *bool
	// AllowOut and DenyOut are the egress rules: IPs, CIDRs and domain
	// names, in internal/network/policy's syntax.
	AllowOut, DenyOut []string
	// PublicTraffic false requires the sandbox's traffic access token on
	// requests to its ports, which needs CreateRequest.Secure (see
	// ErrPrivateInsecure); nil is the default, public.
	PublicTraffic *bool
	// MaskRequestHost replaces the Host header of requests to the
	// sandbox's ports; "${PORT}" in it becomes the port. "" keeps it.
	MaskRequestHost string
}

// InternetAllowed reports whether the sandbox may reach the internet.
func (n Network) InternetAllowed() bool { return n.Internet == nil || *n.Internet }

// Private reports whether requests to the sandbox's ports need its traffic
// access token.
func (n Network) Private() bool { return n.PublicTraffic != nil && !*n.PublicTraffic }

// OnTimeout is what happens to a sandbox when its time is up.
type OnTimeout string

// The actions at a sandbox's timeout.
const (
	// OnTimeoutKill kills the sandbox: the default, and all Hutch does yet.
	OnTimeoutKill OnTimeout = "kill"
	// OnTimeoutPause pauses it, to be resumed later.
	OnTimeoutPause OnTimeout = "pause"
)

// Lifecycle is what happens to a sandbox on its own, without a call.
type Lifecycle struct {
	// OnTimeout is the action at the timeout ("" means OnTimeoutKill).
	OnTimeout OnTimeout
	// PauseFilesystem makes the pause at the timeout keep files only
	// (E2B's autoPauseMemory false); see Manager.Pause.
	PauseFilesystem bool
	// AutoResume resumes a paused sandbox when traffic comes for it.
	AutoResume bool
}

// Sandbox is what the manager knows of one sandbox.
type Sandbox struct {
	ID string
	// TemplateID is the template's name; Alias is the name the creator
	// asked for it by.
	TemplateID, Alias string
	// KeyID is the API key that made the sandbox; only it sees the
	// sandbox ("" for sandboxes made without a key).
	KeyID string
	State State
	// EnvdVersion is the version of the envd the sandbox runs (from the
	// hutch binary that started it).
	EnvdVersion string
	// EnvdAccessToken is envd's access token, "" when the sandbox is not
	// Secure; TrafficAccessToken guards its ports, "" unless
	// Network.Private().
	EnvdAccessToken, TrafficAccessToken string
	// Secure makes envd require EnvdAccessToken.
	Secure    bool
	Limits    Limits
	Network   Network
	Lifecycle Lifecycle
	// Metadata is the creator's; Envs is every process's environment.
	// Neither is nil.
	Metadata, Envs map[string]string
	// StartedAt is when the sandbox was made; EndAt is its timeout.
	StartedAt, EndAt time.Time
	// Volumes are the volumes mounted into the sandbox, in the order of
	// the create request (nil for none).
	Volumes []VolumeMount
	// Runtime names the runtime backend the sandbox runs on ("native",
	// "gvisor").
	Runtime string
	// Image is the image reference the sandbox's template was imported
	// from for its create ("" when it asked for a template by name), and
	// Entrypoint the argv of the main process its creator started (nil
	// for none).
	Image      string
	Entrypoint []string
	// Images are the image roots the sandbox shows, in the order of the
	// create request (nil for none).
	Images []ImageMount
}

// ImageMount is an image's root filesystem shown in a sandbox, for
// programs of the image to run chrooted there (runtime.ImageRoot): the
// MCP gateway runs catalog servers from their images this way. Beside the
// root, at Path+".json", is the image's ImageConfig.
type ImageMount struct {
	// Template names an imported image in the template store; the key
	// creating the sandbox must be allowed to use it.
	Template string
	// Build is filled in by Create: a resume shows the same build.
	Build string
	// Path is where the sandbox sees the root.
	Path string
	// Binds are directories of the sandbox shown in the root.
	Binds []ImageBind
}

// ImageBind is a directory of the sandbox (From) shown in an image's root
// (at To, a path in that root): see runtime.ImageBind.
type ImageBind struct {
	From, To string
	ReadOnly bool
}

// ImageConfig is what an image says about running its programs, written
// as JSON beside its root in the sandbox (ImageMount). Its field names
// are the contract with the program that reads it (the MCP gateway).
type ImageConfig struct {
	// Cmd is the image's Entrypoint followed by its Cmd; Entrypoint is
	// its Entrypoint alone.
	Cmd        []string `json:"cmd,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	// Env holds its KEY=VALUE defaults.
	Env []string `json:"env,omitempty"`
	// WorkingDir and User are the image's ("" when unset).
	WorkingDir string `json:"workingDir,omitempty"`
	User       string `json:"user,omitempty"`
}

// VolumeMount is a volume mounted into a sandbox.
type VolumeMount struct {
	// VolumeID is filled in by Create; a request names volumes by Name.
	VolumeID string
	Name     string
	// Path is where the sandbox sees the volume.
	Path string
}

// ListFilter selects and pages the sandboxes of Manager.List. The zero
// value lists every sandbox, running and paused, newest first, 100 a page.
type ListFilter struct {
	// KeyID keeps the sandboxes of this key ("" = every key's).
	KeyID string
	// Metadata keeps sandboxes whose metadata has every pair.
	Metadata map[string]string
	// States keeps sandboxes in one of these states; empty: every state.
	States []State
	// StartedAfter keeps sandboxes started at or after it (zero: no bound).
	StartedAfter time.Time
	// Template keeps sandboxes whose TemplateID or Alias equals it.
	Template string
	// Ascending lists oldest first.
	Ascending bool
	// Limit is the page size: 0 means 100, and it is clamped to 1..100.
	Limit int
	// NextToken continues from the token a previous call with the same
	// filter returned; a malformed one is an errdefs.ErrInvalidArgument.
	NextToken string
}

// toRecord is sb as the store keeps it, with the runtime's handle info (see
// runtimeInfo).
func toRecord(sb *Sandbox, info string) *store.Sandbox {
	return &store.Sandbox{
		ID: sb.ID, TemplateID: sb.TemplateID, Alias: sb.Alias, KeyID: sb.KeyID, State: string(sb.State),
		EnvdVersion: sb.EnvdVersion, EnvdAccessToken: sb.EnvdAccessToken, TrafficAccessToken: sb.TrafficAccessToken,
		Secure: sb.Secure, CPUCount: sb.Limits.CPUs, MemoryMB: sb.Limits.MemoryMB, DiskSizeMB: sb.Limits.DiskMB,
		CPUMillis: sb.Limits.CPUMillis, Image: sb.Image, Entrypoint: sb.Entrypoint,
		AllowInternetAccess: sb.Network.Internet, AllowOut: sb.Network.AllowOut, DenyOut: sb.Network.DenyOut,
		AllowPublicTraffic: sb.Network.PublicTraffic, MaskRequestHost: sb.Network.MaskRequestHost,
		AutoPause: sb.Lifecycle.OnTimeout == OnTimeoutPause, AutoResume: sb.Lifecycle.AutoResume,
		AutoPauseFilesystem: sb.Lifecycle.PauseFilesystem,
		Metadata:            sb.Metadata, EnvVars: sb.Envs, StartedAt: sb.StartedAt, EndAt: sb.EndAt,
		Runtime: info, VolumeMounts: toStoreMounts(sb.Volumes), ImageMounts: toStoreImages(sb.Images),
	}
}

func toStoreImages(is []ImageMount) []store.ImageMount {
	var out []store.ImageMount
	for _, i := range is {
		im := store.ImageMount{Template: i.Template, Build: i.Build, Path: i.Path}
		for _, b := range i.Binds {
			im.Binds = append(im.Binds, store.ImageBind{From: b.From, To: b.To, ReadOnly: b.ReadOnly})
		}
		out = append(out, im)
	}
	return out
}

func toStoreMounts(vs []VolumeMount) []store.VolumeMount {
	var out []store.VolumeMount
	for _, v := range vs {
		out = append(out, store.VolumeMount{VolumeID: v.VolumeID, Name: v.Name, Path: v.Path})
	}
	return out
}

// fromRecord is the sandbox a store record describes.
func fromRecord(rec *store.Sandbox) *Sandbox {
	sb := &Sandbox{
		ID: rec.ID, TemplateID: rec.TemplateID, Alias: rec.Alias, KeyID: rec.KeyID, State: State(rec.State),
		EnvdVersion: rec.EnvdVersion, EnvdAccessToken: rec.EnvdAccessToken, TrafficAccessToken: rec.TrafficAccessToken,
		Secure: rec.Secure, Limits: Limits{CPUs: rec.CPUCount, CPUMillis: rec.CPUMillis, MemoryMB: rec.MemoryMB, DiskMB: rec.DiskSizeMB},
		Image: rec.Image, Entrypoint: rec.Entrypoint,
		Network: Network{Internet: rec.AllowInternetAccess, AllowOut: rec.AllowOut, DenyOut: rec.DenyOut,
			PublicTraffic: rec.AllowPublicTraffic, MaskRequestHost: rec.MaskRequestHost},
		Lifecycle: Lifecycle{OnTimeout: OnTimeoutKill, AutoResume: rec.AutoResume, PauseFilesystem: rec.AutoPauseFilesystem},
		Metadata:  rec.Metadata, Envs: rec.EnvVars, StartedAt: rec.StartedAt, EndAt: rec.EndAt,
	}
	if rec.AutoPause {
		sb.Lifecycle.OnTimeout = OnTimeoutPause
	}
	for _, v := range rec.VolumeMounts {
		sb.Volumes = append(sb.Volumes, VolumeMount{VolumeID: v.VolumeID, Name: v.Name, Path: v.Path})
	}
	for _, i := range rec.ImageMounts {
		im := ImageMount{Template: i.Template, Build: i.Build, Path: i.Path}
		for _, b := range i.Binds {
			im.Binds = append(im.Binds, ImageBind{From: b.From, To: b.To, ReadOnly: b.ReadOnly})
		}
		sb.Images = append(sb.Images, im)
	}
	var info runtimeInfo
	json.Unmarshal([]byte(rec.Runtime), &info)
	sb.Runtime = info.Backend
	if sb.Runtime == "" {
		sb.Runtime = "native" // recorded before there was another
	}
	return sb
}

// storeFilter is f as the store takes it.
func storeFilter(f ListFilter) store.ListFilter {
	sf := store.ListFilter{KeyID: f.KeyID, Metadata: f.Metadata, StartedAfter: f.StartedAfter,
		Template: f.Template, Limit: f.Limit, NextToken: f.NextToken}
	for _, st := range f.States {
		sf.States = append(sf.States, string(st))
	}
	if f.Ascending {
		sf.Order = "asc"
	}
	return sf
}
