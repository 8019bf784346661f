package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/builder"
	"github.com/hutch-sandbox/hutch/internal/e2bapi"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/mcp/catalog"
	"github.com/hutch-sandbox/hutch/internal/mcp/gateway"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// msgGatewayFailed starts every refusal of an E2B create's mcp option,
// as E2B's SDK starts its own when the gateway does not start.
const msgGatewayFailed = "Failed to start MCP gateway: "

// maxImageServers bounds the catalog servers run from images in one
// sandbox: each is an image to import and a root to mount.
const maxImageServers = 16

// hasMCP reports whether an E2B create's mcp option names anything.
func hasMCP(raw json.RawMessage) bool {
	v := strings.TrimSpace(string(raw))
	return v != "" && v != "null"
}

// mcpImages reads an E2B create's mcp option (the configuration E2B's SDK
// passes to the gateway it then starts in the sandbox) for the catalog
// servers that run from their images: each image is imported into the
// template store as the key's own (once per key; its layers once per
// host), from the mirror when one is set, and becomes an image root of the
// sandbox at gateway.ImageRoot(name), where the gateway finds it. It also
// returns the hosts the configured servers reach (the catalog's, and
// hosted servers'). A configuration the gateway would refuse is refused
// here, before a sandbox is made, with the gateway's reason.
func (s *Server) mcpImages(ctx context.Context, keyID string, raw json.RawMessage) ([]sandbox.ImageMount, []string, error) {
	if !hasMCP(raw) {
		return nil, nil, nil
	}
	servers, err := gateway.ParseConfig(raw)
	if err != nil {
		return nil, nil, e2bapi.BadRequest(msgGatewayFailed + err.Error())
	}
	n := 0
	for _, srv := range servers {
		if srv.Root != "" {
			n++
		}
	}
	if n > maxImageServers {
		// Before any import: each is a pull (review 31, F4).
		return nil, nil, e2bapi.BadRequest(fmt.Sprintf("%s%d servers run from images; a sandbox runs at most %d", msgGatewayFailed, n, maxImageServers))
	}
	var mounts []sandbox.ImageMount
	var hosts []string
	for _, srv := range servers {
		if e := catalog.Load().Lookup(srv.Name); e != nil {
			hosts = append(hosts, e.AllowHosts...)
		}
		if srv.Remote != nil {
			if u, err := url.Parse(srv.Remote.URL); err == nil {
				hosts = append(hosts, u.Host)
			}
		}
		if srv.Root == "" {
			continue
		}
		ref, err := catalog.Mirror(srv.Image, s.mcpMirror)
		if err != nil {
			return nil, nil, e2bapi.BadRequest(fmt.Sprintf("%sserver %q: %v", msgGatewayFailed, srv.Name, err))
		}
		tpl, err := s.importImage(ctx, keyID, builder.Spec{FromImage: ref})
		switch {
		case err == nil:
		case errors.Is(err, errdefs.ErrResourceExhausted), ctx.Err() != nil:
			return nil, nil, err
		default:
			return nil, nil, e2bapi.BadRequest(fmt.Sprintf("%sserver %q runs from its image %s, which could not be pulled: %v", msgGatewayFailed, srv.Name, ref, err))
		}
		im := sandbox.ImageMount{Template: tpl, Path: srv.Root}
		for _, b := range srv.Binds {
			im.Binds = append(im.Binds, sandbox.ImageBind{From: b.From, To: b.To, ReadOnly: b.ReadOnly})
		}
		mounts = append(mounts, im)
	}
	for i, h := range hosts {
		if host, _, err := net.SplitHostPort(h); err == nil {
			hosts[i] = host
		}
	}
	slices.Sort(hosts)
	return mounts, slices.Compact(hosts), nil
}

// mcpEgress is a sandbox's allowOut with the hosts its MCP servers reach
// added, when it has an egress policy (an allowOut or a denyOut): without
// one it reaches everything (or, without internet access, nothing, which
// the creator chose).
func mcpEgress(allowOut, denyOut, hosts []string) []string {
	if len(allowOut) == 0 && len(denyOut) == 0 {
		return allowOut
	}
	out := slices.Clone(allowOut)
	for _, h := range hosts {
		if !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}
