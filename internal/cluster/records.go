package cluster

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// The cluster's records in etcd, under one prefix (Prefix):
//
//	nodes/<name>      a node: where to reach it, its capacity and load;
//	                  bound to the node's lease, rewritten every 2 s
//	holds/<name>/<build>
//	                  a template build the node holds, by its names;
//	                  bound to the node's lease, written when it changes
//	                  (a list in the node's record, rewritten every 2 s,
//	                  grew with every snapshot: review 26 filled etcd so)
//	sandboxes/<id>    a sandbox: its node, key, state, template, metadata,
//	                  times; bound to its node's lease, so a node's death
//	                  takes its sandboxes' records with it
//	keys/<hash>       an API key (hash, id, name, revocation); no lease
//	templates/<ref>   a shared template's newest build (templates.go); no
//	                  lease
//	volumes/<id>      a volume's node, name and key (volumes.go), and
//	volnames/<key>/<name>
//	                  a key's volume name; bound to the node's lease
//
// Field names are Hutch's own, short: a record is read on every routing
// miss and every list.

// Prefix is where the cluster's records live in etcd.
const Prefix = "/hutch/v1/"

const (
	nodesPrefix     = Prefix + "nodes/"
	sandboxesPrefix = Prefix + "sandboxes/"
	keysPrefix      = Prefix + "keys/"
	holdsPrefix     = Prefix + "holds/"
)

// NodeRecord is a node as the cluster sees it.
type NodeRecord struct {
	Name string `json:"name"`
	// URL is the node's cluster listener (--advertise-url).
	URL    string            `json:"url"`
	Labels map[string]string `json:"labels,omitempty"`
	// Capacity is what the node offers; Load what it uses.
	Capacity Capacity `json:"capacity"`
	Load     NodeLoad `json:"load"`
	// Templates are the names and build ids of the templates it holds,
	// from its holds/ records (not part of this one).
	Templates []string  `json:"-"`
	Started   time.Time `json:"started"`
	// Updated is when the node last wrote the record.
	Updated time.Time `json:"updated"`
	// Lease is the etcd lease the node's records are bound to.
	Lease int64 `json:"lease"`
}

// Capacity is what a node offers sandboxes.
type Capacity struct {
	CPUs     int `json:"cpus"`
	MemoryMB int `json:"memory_mb"`
	// Sandboxes is the node's cap on running sandboxes (0: none).
	Sandboxes int `json:"sandboxes,omitempty"`
	// SandboxMemoryMB is each sandbox's memory limit.
	SandboxMemoryMB int `json:"sandbox_memory_mb"`
}

// NodeLoad is how busy a node is.
type NodeLoad struct {
	// CPU is the 1-minute load average over the node's CPUs (1 = every
	// CPU busy).
	CPU float64 `json:"cpu"`
	// MemoryUsedMB is the host's memory in use.
	MemoryUsedMB int `json:"memory_used_mb"`
	// Running, Creating and Warm are sandbox.Load's.
	Running  int            `json:"running"`
	Creating int            `json:"creating"`
	Warm     int            `json:"warm"`
	WarmBy   map[string]int `json:"warm_by,omitempty"`
}

// sandboxRecord is a sandbox as the cluster lists it: what a list shows,
// not its secrets (tokens, environment), which stay on its node.
type sandboxRecord struct {
	Node      string            `json:"node"`
	ID        string            `json:"id"`
	Template  string            `json:"tpl"`
	Alias     string            `json:"tpl_as,omitempty"`
	Key       string            `json:"key,omitempty"`
	State     string            `json:"st"`
	Envd      string            `json:"envd,omitempty"`
	CPUs      int               `json:"cpus"`
	MemoryMB  int               `json:"mem_mb"`
	DiskMB    int               `json:"disk_mb"`
	Meta      map[string]string `json:"meta,omitempty"`
	Started   time.Time         `json:"started"`
	Ends      time.Time         `json:"ends"`
	Runtime   string            `json:"rt,omitempty"`
	Volumes   []mountRecord     `json:"vols,omitempty"`
	OnTimeout string            `json:"on_timeout,omitempty"`
}

type mountRecord struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Path string `json:"path"`
}

func recordOf(node string, sb *sandbox.Sandbox) sandboxRecord {
	r := sandboxRecord{Node: node, ID: sb.ID, Template: sb.TemplateID, Alias: sb.Alias, Key: sb.KeyID,
		State: string(sb.State), Envd: sb.EnvdVersion, CPUs: sb.Limits.CPUs, MemoryMB: sb.Limits.MemoryMB,
		DiskMB: sb.Limits.DiskMB, Meta: sb.Metadata, Started: sb.StartedAt, Ends: sb.EndAt, Runtime: sb.Runtime,
		OnTimeout: string(sb.Lifecycle.OnTimeout)}
	for _, v := range sb.Volumes {
		r.Volumes = append(r.Volumes, mountRecord{ID: v.VolumeID, Name: v.Name, Path: v.Path})
	}
	return r
}

func (r *sandboxRecord) sandbox() *sandbox.Sandbox {
	sb := &sandbox.Sandbox{ID: r.ID, TemplateID: r.Template, Alias: r.Alias, KeyID: r.Key, State: sandbox.State(r.State),
		EnvdVersion: r.Envd, Limits: sandbox.Limits{CPUs: r.CPUs, MemoryMB: r.MemoryMB, DiskMB: r.DiskMB},
		Metadata: r.Meta, Envs: map[string]string{}, StartedAt: r.Started, EndAt: r.Ends, Runtime: r.Runtime,
		Lifecycle: sandbox.Lifecycle{OnTimeout: sandbox.OnTimeout(r.OnTimeout)}}
	if sb.Metadata == nil {
		sb.Metadata = map[string]string{}
	}
	for _, v := range r.Volumes {
		sb.Volumes = append(sb.Volumes, sandbox.VolumeMount{VolumeID: v.ID, Name: v.Name, Path: v.Path})
	}
	return sb
}

// keyRecord is an API key as the cluster shares it.
type keyRecord struct {
	ID      string     `json:"id"`
	Name    string     `json:"name"`
	Prefix  string     `json:"prefix"`
	Hash    []byte     `json:"hash"`
	Created time.Time  `json:"created"`
	Revoked *time.Time `json:"revoked,omitempty"`
	// Role is the key's (store.Role); absent, from a node older than
	// roles, it imports as a user key.
	Role string `json:"role,omitempty"`
}

// mustJSON encodes one of this package's records, which always encode.
// HTML is not escaped: a "<" stays one byte, not six.
func mustJSON(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}
