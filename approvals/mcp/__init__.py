"""Gatehouse's MCP endpoint (`/mcp`): the official SDK's Streamable HTTP server over the one pipeline.

`http.McpEndpoint` is the ASGI app `config.asgi` mounts (and puts the caller into
the scope `identity` reads); `server` holds the tools/list and tools/call handlers;
`results` shapes what a model reads back; `tasks` answers held calls as tasks to
clients that declare the Tasks extension; `catalog` serves tools/list_changed where
the protocol allows it.
"""
