package e2bapi

import "time"

// ClusterNode is a node of a Hutch cluster (`hutch serve --cluster`) in
// GET /cluster/nodes: Hutch's own call beside E2B's API, served by
// internal/server and read by the Go SDK.
type ClusterNode struct {
	Name string `json:"name"`
	// URL is the node's cluster listener.
	URL string `json:"url"`
	// Self marks the node that answered.
	Self   bool              `json:"self"`
	Labels map[string]string `json:"labels,omitempty"`
	// Templates counts the template names and builds the node holds;
	// which they are is each key's own business (GET /templates).
	Templates    int       `json:"templates"`
	Started      time.Time `json:"started"`
	Updated      time.Time `json:"updated"`
	CPUs         int       `json:"cpus"`
	MemoryMB     int       `json:"memoryMB"`
	MaxSandboxes int       `json:"maxSandboxes"`
	// CPULoad is the 1-minute load average over the node's CPUs.
	CPULoad      float64 `json:"cpuLoad"`
	MemoryUsedMB int     `json:"memoryUsedMB"`
	Running      int     `json:"running"`
	Creating     int     `json:"creating"`
	Warm         int     `json:"warm"`
	// LeaseSeconds is what the node's lease has left (-1: unknown).
	LeaseSeconds int `json:"leaseSeconds"`
}
