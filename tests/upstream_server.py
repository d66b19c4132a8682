"""A peer MCP server for the upstream tests: the official SDK's low-level server, in a process of its own.

Its tools come from a JSON state file read on every request, so a test changes what
the upstream offers by rewriting the file (then syncs):

    {"tools": [{"name", "description", "inputSchema", "annotations"?}, …],
     "behaviours": {"<tool>": "echo" | "error" | "hang" | "die"}}

Every tools/call is appended to the calls file (one JSON line: name, arguments)
before the tool does anything, so a test counts what really reached the upstream.
`die` exits the process after counting (an upstream killed mid-call); `hang` never answers.

    python tests/upstream_server.py stdio              (UPSTREAM_STATE, UPSTREAM_CALLS from the environment)
    python tests/upstream_server.py http PORT [TOKEN]  (TOKEN: the Bearer token required, if any)
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server


def _state() -> dict[str, Any]:
    return json.loads(Path(os.environ["UPSTREAM_STATE"]).read_text())


async def list_tools(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    tools = [types.Tool.model_validate(tool) for tool in _state()["tools"]]
    return types.ListToolsResult(tools=tools)


async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
    arguments = params.arguments or {}
    with Path(os.environ["UPSTREAM_CALLS"]).open("a") as calls:
        calls.write(json.dumps({"name": params.name, "arguments": arguments}) + "\n")
    behaviour = _state().get("behaviours", {}).get(params.name, "echo")
    if behaviour == "die":
        os._exit(3)
    if behaviour == "hang":
        await anyio.sleep(3600)
    if behaviour == "error":
        message = f"{params.name} refused: the seats are no longer available"
        return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)
    answer = {"tool": params.name, "arguments": arguments, "at": time.time()}
    return types.CallToolResult(content=[types.TextContent(text=json.dumps(answer))], structured_content=answer)


server = Server("upstream-peer", version="1", on_list_tools=list_tools, on_call_tool=call_tool)


async def run_stdio() -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def run_http(port: int, token: str) -> None:
    import uvicorn

    app = server.streamable_http_app(stateless_http=True, json_response=True)

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and token:
            headers = dict(scope["headers"])
            if headers.get(b"authorization", b"").decode() != f"Bearer {token}":
                body = b'{"error": "unauthorized"}'
                await send(
                    {"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"application/json")]}
                )
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    uvicorn.run(guarded, host="127.0.0.1", port=port, log_level="warning", lifespan="on")


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        anyio.run(run_stdio)
    else:
        run_http(int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "")
