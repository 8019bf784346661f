// E2B's MCP quick start as published, verbatim below this comment: the
// TypeScript tab of "Create an E2B sandbox with MCP servers" on Docker's
// docs page "E2B sandboxes" (https://docs.docker.com/ai/mcp-catalog-and-toolkit/e2b-sandboxes/,
// formerly .../sandboxes/), whose source is
// https://github.com/docker/docs/blob/c152b6077de713b58153ea7700314d3be35dd47c/content/manuals/ai/mcp-catalog-and-toolkit/e2b-sandboxes.md
// (docker/docs commit c152b6077de713b58153ea7700314d3be35dd47c; the
// earlier sandboxes.md, commit 19a7926dd751f0baaa9cee30fedfc5a8ad0e1a96,
// differs only in formatting and in saying "Claude CLI"). E2B's own docs
// (e2b-dev/docs docs/mcp.mdx and docs/mcp/quickstart.mdx) show the same
// Sandbox.betaCreate / betaGetMcpUrl / betaGetMcpToken / `claude mcp add`
// calls without the "Connection successful!" line. The page says: `npm
// install e2b dotenv`, package.json "type": "module", run with
// `npx tsx index.ts`. test/quickstart runs it unchanged with tsx (see
// package.json); nothing below this comment is Hutch's.
import "dotenv/config";
import { Sandbox } from "e2b";

async function quickstart(): Promise<void> {
  console.log("Creating E2B sandbox with Notion and GitHub MCP servers...\n");

  const sbx: Sandbox = await Sandbox.betaCreate({
    envs: {
      ANTHROPIC_API_KEY: process.env.ANTHROPIC_API_KEY as string,
    },
    mcp: {
      notion: {
        internalIntegrationToken: process.env
          .NOTION_INTEGRATION_TOKEN as string,
      },
      githubOfficial: {
        githubPersonalAccessToken: process.env.GITHUB_TOKEN as string,
      },
    },
  });

  const mcpUrl: string = sbx.betaGetMcpUrl();
  const mcpToken: string = await sbx.betaGetMcpToken();

  console.log("Sandbox created successfully!");
  console.log(`MCP Gateway URL: ${mcpUrl}\n`);

  // Wait for MCP initialization
  await new Promise<void>((resolve) => setTimeout(resolve, 1000));

  // Connect Claude to MCP gateway
  console.log("Connecting Claude to MCP gateway...");
  await sbx.commands.run(
    `claude mcp add --transport http e2b-mcp-gateway ${mcpUrl} --header "Authorization: Bearer ${mcpToken}"`,
    {
      timeoutMs: 0,
      onStdout: console.log,
      onStderr: console.log,
    },
  );

  console.log("\nConnection successful! Cleaning up...");
  await sbx.kill();
}

quickstart().catch(console.error);
