"""mcp-use's SandboxConnector, unmodified, against the E2B endpoint the
environment names (E2B_DOMAIN, E2B_API_KEY; SSL_CERT_FILE trusts its CA).

MCPClient.from_dict with sandbox=True, as mcp-use documents it, runs
@modelcontextprotocol/server-memory through `npx -y supergateway` inside a
`base` sandbox; this lists the tools, creates an entity, reads the graph
back, closes, and prints one JSON line for the Go test:
{"sandbox": id, "tools": [...], "graph": {...}}.
"""

import asyncio
import json
import os
import sys

from mcp_use import MCPClient


async def main() -> None:
    config = {
        "mcpServers": {
            "memory": {
                "command": "npx",
                "args": ["-y", "@modelcontextprotocol/server-memory"],
                "env": {"MEMORY_FILE_PATH": "/home/user/memory.jsonl"},
            }
        }
    }
    client = MCPClient.from_dict(
        config,
        sandbox=True,
        sandbox_options={
            "api_key": os.environ["E2B_API_KEY"],
            "sandbox_template_id": "base",
        },
    )
    try:
        session = await client.create_session("memory")
        sandbox_id = session.connector.sandbox.sandbox_id
        tools = sorted(t.name for t in await session.list_tools())
        created = await session.call_tool(
            "create_entities",
            {"entities": [{"name": "hutch", "entityType": "sandbox", "observations": ["speaks E2B"]}]},
        )
        if created.isError:
            raise SystemExit(f"create_entities failed: {created.content}")
        read = await session.call_tool("read_graph", {})
        if read.isError:
            raise SystemExit(f"read_graph failed: {read.content}")
        graph = read.structuredContent or json.loads(read.content[0].text)
    finally:
        await client.close_all_sessions()
    print(json.dumps({"sandbox": sandbox_id, "tools": tools, "graph": graph}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
