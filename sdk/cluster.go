package sdk

import (
	"context"
	"net/http"
	"time"
)

// ClusterNode is a node of a Hutch cluster (`hutch serve --cluster`), as
// GET /cluster/nodes reports it: Hutch's own API, not E2B's.
type ClusterNode struct {
	Name string `json:"name"`
	// URL is the node's cluster listener.
	URL string `json:"url"`
	// Self marks the node that answered.
	Self   bool              `json:"self"`
	Labels map[string]string `json:"labels,omitempty"`
	// Templates are the names and build ids of the templates it holds.
	Templates    []string  `json:"templates"`
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

// ClusterNodes lists the nodes of the cluster the server belongs to; a
// server that is not in one answers ErrNotFound.
func (c *Client) ClusterNodes(ctx context.Context) ([]ClusterNode, error) {
	var out []ClusterNode
	_, err := c.api(ctx, "list cluster nodes", http.MethodGet, "/cluster/nodes", nil, nil, &out, http.StatusOK)
	return out, err
}
