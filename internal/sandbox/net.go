package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"

	"github.com/hutch-sandbox/hutch/internal/envdapi"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/network"
	"github.com/hutch-sandbox/hutch/internal/network/policy"
	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// Network is what a create request asks of a sandbox's network, beyond
// allow_internet_access.
type Network struct {
	// AllowOut and DenyOut are the egress rules (IPs, CIDRs, domains).
	AllowOut, DenyOut []string
	// AllowPublicTraffic false requires the sandbox's traffic access token
	// on requests to its ports; it needs CreateRequest.Secure (see
	// ErrPrivateInsecure).
	AllowPublicTraffic *bool
	// MaskRequestHost replaces the Host header of requests to the sandbox's
	// ports; "${PORT}" in it becomes the port.
	MaskRequestHost string
	// JSON is the request's network object, kept as it came for getInfo.
	JSON string
}

// netRecord is the part of a record's network object the manager reads.
type netRecord struct {
	AllowOut        []string `json:"allowOut"`
	DenyOut         []string `json:"denyOut"`
	MaskRequestHost *string  `json:"maskRequestHost"`
}

// egressOf is the policy a sandbox's record describes.
func egressOf(rec *store.Sandbox) (*policy.Egress, error) {
	var n netRecord
	if rec.Network != "" {
		if err := json.Unmarshal([]byte(rec.Network), &n); err != nil {
			return nil, fmt.Errorf("sandbox %s: network record: %w", rec.ID, err)
		}
	}
	return policy.Parse(rec.AllowInternetAccess == nil || *rec.AllowInternetAccess, n.AllowOut, n.DenyOut)
}

// ValidateNetwork checks egress rules before anything is made; its error
// says which rule is wrong.
func ValidateNetwork(allowOut, denyOut []string) error {
	_, err := policy.Parse(true, allowOut, denyOut)
	return err
}

// attachNetwork gives a sandbox that may reach the internet its link, its
// firewall and a resolv.conf naming the host's resolver; a sandbox without
// internet keeps loopback only. Nothing happens without a network manager.
// token is envd's access token once /init has set it ("" before).
func (m *Manager) attachNetwork(ctx context.Context, sbx runtime.Sandbox, rt *route, p *policy.Egress, token string) error {
	if m.net == nil || !p.Internet {
		return nil
	}
	st, err := sbx.Status(ctx)
	if err != nil {
		return err
	}
	addr, err := m.net.Attach(ctx, sbx.ID(), st.Pid, p)
	if err != nil {
		return err
	}
	// Every DNS packet goes to the host's resolver whatever the sandbox's
	// resolv.conf says; this one just names a server that answers.
	body := "# written by hutch: the host's resolver for this sandbox\nnameserver " + addr.Gateway.String() + "\n"
	if err := envdapi.NewClient(rt.host).WriteFile(ctx, "/etc/resolv.conf", "root", token, []byte(body)); err != nil {
		m.net.Detach(context.Background(), sbx.ID())
		return fmt.Errorf("write the sandbox's resolv.conf: %w", err)
	}
	return nil
}

// NetworkUpdate is PUT /sandboxes/{id}/network. As E2B's, it replaces the
// egress configuration: an omitted list is cleared, an omitted
// AllowInternet means the default (internet allowed).
type NetworkUpdate struct {
	AllowOut, DenyOut []string
	AllowInternet     *bool
}

// UpdateNetwork changes a running sandbox's egress policy at once:
// connections the new policy denies are cut. Inbound settings
// (allowPublicTraffic, maskRequestHost) are not egress and stay.
func (m *Manager) UpdateNetwork(ctx context.Context, keyID, id string, upd NetworkUpdate) (*store.Sandbox, error) {
	rec, err := m.store.GetSandbox(ctx, keyID, id)
	if err != nil {
		return nil, err
	}
	obj := map[string]any{}
	if rec.Network != "" {
		if err := json.Unmarshal([]byte(rec.Network), &obj); err != nil {
			return nil, fmt.Errorf("sandbox %s: network record: %w", id, err)
		}
	}
	delete(obj, "allowOut")
	delete(obj, "denyOut")
	if len(upd.AllowOut) > 0 {
		obj["allowOut"] = upd.AllowOut
	}
	if len(upd.DenyOut) > 0 {
		obj["denyOut"] = upd.DenyOut
	}
	next := rec
	next.Network = ""
	if len(obj) > 0 {
		b, _ := json.Marshal(obj)
		next.Network = string(b)
	}
	next.AllowInternetAccess = upd.AllowInternet
	p, err := egressOf(&next)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
	}
	if m.net != nil {
		err := m.net.Update(ctx, id, p)
		if errors.Is(err, network.ErrNoNetwork) && p.Internet {
			// Created without internet: it gets its link now.
			m.mu.Lock()
			l := m.live[id]
			m.mu.Unlock()
			if l == nil {
				return nil, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
			}
			err = m.attachNetwork(ctx, l.metrics.sbx, l.route, p, rec.EnvdAccessToken)
		} else if errors.Is(err, network.ErrNoNetwork) {
			err = nil // no internet before, none now
		}
		if err != nil {
			return nil, err
		}
	}
	if err := m.store.SetNetwork(ctx, id, next.Network, next.AllowInternetAccess); err != nil {
		return nil, err
	}
	return &next, nil
}

// Egress returns the policy of the sandbox at a source address, for the
// resolver and the egress proxy.
func (m *Manager) Egress(client netip.Addr) (*policy.Egress, bool) {
	if m.net == nil {
		return nil, false
	}
	return m.net.Policy(client)
}
