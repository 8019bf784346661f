package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
	"github.com/hutch-sandbox/hutch/internal/mcp/gateway"
	"github.com/hutch-sandbox/hutch/sdk"
)

// sandboxRow is the running sandbox of the sandbox row.
type sandboxRow struct {
	sbx *sdk.Sandbox
}

func (s *sandboxRow) kill() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.sbx.Kill(ctx)
}

// gatewayConfig is the sandbox gateway's --config: the catalog's
// "everything", i.e. `mcp-server-everything stdio` as installed in the
// mcp-gateway template.
const gatewayConfig = `{"everything":{}}`

// sandboxRow: Hutch's gateway as E2B's SDK starts it, in a sandbox of
// template mcp-gateway, reached through `hutch serve`'s routing.
func (b *bench) sandboxRow() *contender {
	c := &contender{key: "sandbox", name: "hutch gateway in a sandbox", tool: "everything" + gateway.Separator + toolName,
		procs: "1 (shared)", procTree: true}
	apiKey := os.Getenv("E2B_API_KEY")
	switch {
	case b.cfg.serveURL == "":
		c.unavailable = "no hutch serve (-serve-url; bench/mcp-gateway.sh starts one when the mcp-gateway template exists)"
		return c
	case apiKey == "":
		c.unavailable = "E2B_API_KEY is not set (bench/mcp-gateway.sh sets it)"
		return c
	}
	url := b.cfg.serveURL
	tok := token()
	var sbx *sdk.Sandbox
	c.start = func(ctx context.Context) error {
		cl, err := sdk.NewClient(sdk.Config{APIKey: apiKey, APIURL: url, SandboxURL: url})
		if err != nil {
			return err
		}
		// Loopback only (serve runs with --network=false); the catalog's
		// everything server runs offline from the template.
		sbx, err = cl.Create(ctx, sdk.CreateOptions{Template: "mcp-gateway", Timeout: time.Hour})
		if err != nil {
			return fmt.Errorf("create a sandbox of template mcp-gateway: %w", err)
		}
		b.mu.Lock()
		b.sbx = &sandboxRow{sbx: sbx}
		b.mu.Unlock()
		// What E2B's JS SDK runs for Sandbox.create({mcp}).
		res, err := sbx.Commands.Run(ctx, "mcp-gateway --config '"+gatewayConfig+"'",
			&sdk.RunOptions{User: "root", Envs: map[string]string{"GATEWAY_ACCESS_TOKEN": tok}, Timeout: 60 * time.Second})
		if err != nil {
			out := ""
			if res != nil {
				out = res.Stdout + res.Stderr
			}
			return fmt.Errorf("mcp-gateway --config in the sandbox: %w %s", err, harness.OneLine(out))
		}
		// The sandbox's own versions, for the record.
		v, err := sbx.Commands.Run(ctx, "node --version; cat /usr/local/lib/node_modules/@modelcontextprotocol/server-everything/package.json", nil)
		if err == nil {
			var pkg struct{ Version string }
			nodeV, rest, _ := strings.Cut(v.Stdout, "\n")
			json.Unmarshal([]byte(rest), &pkg)
			b.note(fmt.Sprintf("sandbox row: sandbox %s of template mcp-gateway (node %s, server-everything %s), `mcp-gateway --config '%s'` run as root; client at %s/mcp with E2b-Sandbox-Id and E2b-Sandbox-Port: %d;",
				sbx.ID, strings.TrimSpace(nodeV), pkg.Version, gatewayConfig, url, gateway.Port))
			b.note("its server CPU/call is hutch serve's process (routing) plus every process of the sandbox (its init, envd, the gateway, the server).")
		}
		return nil
	}
	c.open = func(ctx context.Context) (*mcp.ClientSession, int, error) {
		h := map[string]string{
			"Authorization":    "Bearer " + tok,
			"E2b-Sandbox-Id":   sbx.ID,
			"E2b-Sandbox-Port": strconv.Itoa(gateway.Port),
		}
		if sbx.TrafficAccessToken != "" {
			h["E2b-Traffic-Access-Token"] = sbx.TrafficAccessToken
		}
		cs, err := httpSession(ctx, url+gateway.Path, h)
		return cs, 0, err
	}
	// serverPID is serve's process; the sandbox's init is added by roots.
	c.serverPID = func() int { return b.cfg.servePID }
	c.extraPIDs = func() []int {
		if sbx == nil {
			return nil
		}
		if p := b.sandboxInit(sbx.ID); p > 0 {
			return []int{p}
		}
		return nil
	}
	c.stop = func() {
		b.mu.Lock()
		s := b.sbx
		b.sbx = nil
		b.mu.Unlock()
		if s != nil {
			s.kill()
		}
	}
	return c
}

// sandboxInit is the host pid of sandbox id's init, from `hutch ps
// --json` in serve's data directory; 0 if unknown.
func (b *bench) sandboxInit(id string) int {
	if b.cfg.serveData == "" {
		return 0
	}
	cmd := exec.Command(b.cfg.hutch, "ps", "--json")
	cmd.Env = append(os.Environ(), "HUTCH_DATA_DIR="+b.cfg.serveData)
	out, err := cmd.Output()
	if err != nil {
		return 0
	}
	var list []struct {
		ID  string
		Pid int
	}
	if json.Unmarshal(out, &list) != nil {
		return 0
	}
	for _, s := range list {
		if s.ID == id {
			return s.Pid
		}
	}
	return 0
}
