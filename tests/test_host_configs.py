"""The MCP host configs the docs give (VS Code, Cursor, Claude Desktop via mcp-remote, a generic list) work.

A config is a fenced block marked ```` ```json host=NAME ````. Each is read as its host
reads it — VS Code's `servers` with `${input:…}` prompts, the `mcpServers` lists with
`url` + `headers`, or a stdio command running `mcp-remote URL --header "Name:${VAR}"` with
`VAR` from its `env` — and the URL and header it names list the agent's tools on a running
Gatehouse through the official SDK client. Only the origin (the docs' example host) and
the token placeholder are replaced; the path and the header are the documented ones.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import AgentFactory
from tests.mcp_server import LiveAsgi

BASE_DIR = Path(__file__).resolve().parent.parent
DOCUMENTS = [BASE_DIR / "README.md", *sorted((BASE_DIR / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(?P<info>[^`\n]*)\n(?P<body>.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
TOKEN_PLACEHOLDER = "gh_…"
VARIABLE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class HostConfig:
    """One documented host config block."""

    document: str
    host: str
    config: dict[str, Any]

    def __str__(self) -> str:
        return f"{self.document}:{self.host}"


@dataclass(frozen=True)
class Endpoint:
    """Where a host config sends MCP requests, and the headers it sends."""

    url: str
    headers: dict[str, str]


def host_configs() -> list[HostConfig]:
    """Return every ```json host=NAME block of the README and docs, parsed."""
    found = []
    for path in DOCUMENTS:
        for block in FENCE.finditer(path.read_text()):
            words = block["info"].split()
            hosts = [word.split("=", 1)[1] for word in words if word.startswith("host=")]
            if words[:1] == ["json"] and hosts:
                found.append(HostConfig(str(path.relative_to(BASE_DIR)), hosts[0], json.loads(block["body"])))
    return found


CONFIGS = host_configs()


def endpoints(config: dict[str, Any], token: str) -> list[Endpoint]:
    """Return the endpoints of every server a host config declares, with `token` where the docs leave it out."""
    prompts = {item["id"] for item in config.get("inputs", []) if item.get("password")}
    servers = config.get("servers") or config.get("mcpServers") or {}
    assert servers, "a host config declares its servers under 'servers' or 'mcpServers'"
    found = []
    for entry in servers.values():
        endpoint = bridged(entry) if "command" in entry else Endpoint(entry["url"], dict(entry.get("headers", {})))
        assert entry.get("type", "http") == "http" or "command" in entry, "a remote server is Streamable HTTP"
        headers = {name: fill(value, prompts, token) for name, value in endpoint.headers.items()}
        found.append(Endpoint(endpoint.url, headers))
    return found


def bridged(entry: dict[str, Any]) -> Endpoint:
    """Return where an `mcp-remote` stdio entry connects: its URL argument and its --header values, env filled in."""
    args, env = entry["args"], entry.get("env", {})
    assert entry["command"] == "npx" and "mcp-remote" in args
    url = args[args.index("mcp-remote") + 1]
    headers = {}
    for index, arg in enumerate(args):
        if arg == "--header":
            name, _, value = args[index + 1].partition(":")  # mcp-remote splits at the first colon
            headers[name.strip()] = VARIABLE.sub(lambda match: env[match["name"]], value).strip()
    return Endpoint(url, headers)


def fill(value: str, prompts: set[str], token: str) -> str:
    """Return a header value with the token where the docs leave a placeholder or a secret prompt."""
    for prompt in prompts:
        value = value.replace(f"${{input:{prompt}}}", token)
    assert "${" not in value, f"unresolved variable in {value!r}"
    return value.replace(TOKEN_PLACEHOLDER, token)


def on(live: LiveAsgi, url: str) -> str:
    """Return the documented URL on the running server: its path and query kept, only the origin replaced."""
    parts = urlsplit(url)
    assert parts.path == "/mcp", f"{url} is not Gatehouse's /mcp"
    return live.url + parts.path + (f"?{parts.query}" if parts.query else "")


async def list_tools(endpoint: Endpoint) -> list[str]:
    async with (
        httpx2.AsyncClient(headers=endpoint.headers, timeout=30) as http,
        Client(streamable_http_client(endpoint.url, http_client=http)) as client,
    ):
        return [tool.name for tool in (await client.list_tools()).tools]


def test_the_docs_give_tested_configs_for_vs_code_cursor_and_claude_desktop() -> None:
    assert {"vscode", "cursor", "claude-desktop"} <= {config.host for config in CONFIGS}


@pytest.mark.parametrize("documented", CONFIGS, ids=str)
def test_a_documented_host_config_lists_the_agents_tools_on_a_running_gatehouse(
    documented: HostConfig, live_asgi: LiveAsgi, make_agent: AgentFactory
) -> None:
    _, token = make_agent("box-office-agent", {"search_seats": 0, "hold_seats": 1})

    for endpoint in endpoints(documented.config, token):
        assert endpoint.headers == {"Authorization": f"Bearer {token}"}
        names = asyncio.run(list_tools(Endpoint(on(live_asgi, endpoint.url), endpoint.headers)))
        assert names == ["hold_seats", "search_seats", "get_call_status"]
