"""A live ASGI server (Django + `/mcp`) for MCP tests.

pytest-django's `live_server` serves WSGI only, and `/mcp` is ASGI, so this runs
the real `config.asgi` routing under uvicorn in a background thread of the test
process. It shares the test database: tests that use it need `transactional_db`
(data committed, so the server's threads see it).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import uvicorn


def free_port() -> int:
    """Return a TCP port nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass(frozen=True)
class LiveAsgi:
    """Where the live server listens."""

    url: str

    @property
    def mcp_url(self) -> str:
        return f"{self.url}/mcp"


@pytest.fixture(scope="session")
def asgi_server(django_db_setup: None) -> Iterator[LiveAsgi]:
    """Start uvicorn on `config.asgi`'s routing (lifespan on) once for the session."""
    from approvals.mcp.http import McpEndpoint
    from config.asgi import django_application, route

    port = free_port()
    app = route(django_application, McpEndpoint())  # a fresh endpoint: its session manager runs once
    config = uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="on", log_level="warning", workers=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="mcp-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the ASGI test server did not start")
        time.sleep(0.02)
    yield LiveAsgi(f"http://127.0.0.1:{port}")
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def live_asgi(asgi_server: LiveAsgi, transactional_db: None) -> LiveAsgi:
    """The live ASGI server, with committed test data it can see."""
    return asgi_server
