"""Real upstream MCP servers for the upstream tests (tests/upstream_server.py in processes of their own).

`peer` is parametrised over both transports: Streamable HTTP (a server process
listening on a free port, requiring a secret Bearer token) and stdio (the command
Gatehouse starts itself for each session). Either way the test writes the tools the
upstream offers (`peer.offer(...)`) and reads what reached it (`peer.calls()`).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.processes import BASE_DIR, free_port, wait_until

SERVER = BASE_DIR / "tests" / "upstream_server.py"
SECRET_TOKEN = "s3cr3t-upstream-token-7f1e9a"  # the header value no page, API, event or log may show

SEARCH = {
    "name": "search_seats",
    "description": "Find free seats for an event.",
    "inputSchema": {
        "type": "object",
        "properties": {"event_id": {"type": "string"}, "quantity": {"type": "integer", "minimum": 1}},
        "required": ["event_id"],
    },
    "annotations": {"readOnlyHint": True},
}
HOLD = {
    "name": "hold_seats",
    "description": "Hold seats for ten minutes.",
    "inputSchema": {
        "type": "object",
        "properties": {"event_id": {"type": "string"}, "seat_ids": {"type": "array", "items": {"type": "string"}}},
        "required": ["event_id", "seat_ids"],
    },
    "annotations": {"readOnlyHint": False, "destructiveHint": False},
}
CANCEL = {
    "name": "cancel_order",
    "description": "Cancel an order for good.",
    "inputSchema": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
    "annotations": {"destructiveHint": True},
}


@dataclass
class Peer:
    """One upstream MCP server a test talks to."""

    transport: str
    folder: Path
    url: str = ""
    process: subprocess.Popen[bytes] | None = None
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def state(self) -> Path:
        return self.folder / "state.json"

    @property
    def calls_file(self) -> Path:
        return self.folder / "calls.jsonl"

    def offer(self, *tools: dict[str, Any], behaviours: dict[str, str] | None = None) -> None:
        """Make the upstream list exactly `tools` from now on."""
        self.state.write_text(json.dumps({"tools": list(tools), "behaviours": behaviours or {}}))

    def calls(self, name: str | None = None) -> list[dict[str, Any]]:
        """Return the tools/calls that reached the upstream (of tool `name`, if given)."""
        if not self.calls_file.exists():
            return []
        calls = [json.loads(line) for line in self.calls_file.read_text().splitlines() if line]
        return [c for c in calls if name is None or c["name"] == name]

    def env(self) -> dict[str, str]:
        return {"UPSTREAM_STATE": str(self.state), "UPSTREAM_CALLS": str(self.calls_file)}

    def register(self, name: str = "box", **options: Any) -> Any:
        """Register this peer as upstream `name` (through the same function the command uses)."""
        from toolcatalog.upstreams_sync import add_upstream

        if self.transport == "http":
            headers = {"Authorization": f"Bearer {SECRET_TOKEN}"}
            return add_upstream(name, url=self.url, headers=headers, **options)
        command = f"{sys.executable} {SERVER} stdio"
        return add_upstream(name, command=command, env={**self.env(), **self.extra_env}, **options)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


def start_http_peer(folder: Path) -> Peer:
    """Start the peer over Streamable HTTP; return it once it accepts connections."""
    port = free_port()
    peer = Peer("http", folder, url=f"http://127.0.0.1:{port}/mcp")
    peer.offer()
    env = {**os.environ, **peer.env()}
    peer.process = subprocess.Popen(
        [sys.executable, str(SERVER), "http", str(port), SECRET_TOKEN], env=env, start_new_session=True
    )
    wait_until(lambda: _listening(port), timeout=20)
    return peer


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(params=["http", "stdio"])
def peer(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Peer]:
    """An upstream MCP server over each transport in turn."""
    if request.param == "http":
        started = start_http_peer(tmp_path)
        try:
            yield started
        finally:
            started.kill()
    else:
        stdio = Peer("stdio", tmp_path)
        stdio.offer()
        yield stdio


@pytest.fixture
def http_peer(tmp_path: Path) -> Iterator[Peer]:
    """An upstream MCP server over Streamable HTTP only."""
    started = start_http_peer(tmp_path)
    try:
        yield started
    finally:
        started.kill()
