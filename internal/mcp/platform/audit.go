package platform

import (
	"context"
	"encoding/json"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutch-sandbox/hutch/sdk"
)

// reportCalls reports every tool call to the audit trail of the hutch
// serve the call acted on, under the call's own key: the tool, its
// arguments (the server redacts them), the sandbox and the outcome. What
// the tool did through the API (a command, a file write) is recorded by
// the server besides. A report that fails is logged, never the call's
// failure.
func (s *Server) reportCalls(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		call, ok := req.(*mcp.CallToolRequest)
		if !ok || method != "tools/call" {
			return next(ctx, method, req)
		}
		start := time.Now()
		res, err := next(ctx, method, req)
		c, cerr := s.opts.Client(ctx, call)
		if cerr != nil {
			return res, err
		}
		detail := map[string]any{"tool": call.Params.Name, "via": "hutch mcp", "durationMs": time.Since(start).Milliseconds()}
		var args map[string]any
		if json.Unmarshal(call.Params.Arguments, &args) == nil && len(args) > 0 {
			detail["arguments"] = args
		}
		sandboxID, _ := args["sandbox_id"].(string)
		outcome := "ok"
		if r, ok := res.(*mcp.CallToolResult); err != nil || (ok && r != nil && r.IsError) {
			outcome = "error"
		} else if ok && r != nil && sandboxID == "" {
			// sandbox_create's: the sandbox it made.
			var out struct {
				SandboxID string `json:"sandbox_id"`
			}
			if b, err := json.Marshal(r.StructuredContent); err == nil && json.Unmarshal(b, &out) == nil {
				sandboxID = out.SandboxID
			}
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if rerr := c.ReportEvent(rctx, sdk.Event{Kind: "mcp", Action: "tool.call", SandboxID: sandboxID, Outcome: outcome, Detail: detail}); rerr != nil {
			s.log.Warn("audit: report a tool call", "tool", call.Params.Name, "err", rerr)
		}
		return res, err
	}
}
