package sdk

import (
	"context"
	"net/http"

	"github.com/hutch-sandbox/hutch/internal/e2bapi"
)

// ClusterNode is a node of a Hutch cluster (`hutch serve --cluster`), as
// GET /cluster/nodes reports it: Hutch's own API, not E2B's.
type ClusterNode = e2bapi.ClusterNode

// ClusterNodes lists the nodes of the cluster the server belongs to; a
// server that is not in one answers ErrNotFound.
func (c *Client) ClusterNodes(ctx context.Context) ([]ClusterNode, error) {
	var out []ClusterNode
	_, err := c.api(ctx, "list cluster nodes", http.MethodGet, "/cluster/nodes", nil, nil, &out, http.StatusOK)
	return out, err
}
