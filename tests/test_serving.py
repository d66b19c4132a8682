"""The Procfile's web server, a real gunicorn on config.wsgi: one origin for the console, the agent API and `/mcp`."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import httpx2
import pytest
from django.conf import settings
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import AgentFactory, refund
from tests.embedded import procfile
from tests.processes import BASE_DIR, free_port, session_database_url, wait_until
from tests.test_body_limit import ANSWER_TIMEOUT, CHUNK, answer, chunk, request_head

NO_WAIT = {"gatehouse/wait_seconds": 0}  # no worker runs here: the call stays approved
SEATS = {"event_id": "show-sabado", "quantity": 2, "max_price_brl": 300}


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz/live", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


@contextmanager
def running_web_server(folder: Path, **settings: str) -> Iterator[str]:
    """Run the Procfile's `web` command on the test database, with `settings` added to its environment."""
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": session_database_url(),
        "GATEHOUSE_WEB_BIND": f"127.0.0.1:{port}",
        "WEB_CONCURRENCY": "2",
        "GATEHOUSE_VAR_DIR": str(folder),
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
        **settings,
    }
    log = (folder / "web.log").open("wb")
    process = subprocess.Popen(
        ["bash", "-c", procfile()["web"]], cwd=BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: process.poll() is not None or _answers(url), timeout=60, interval=0.2)
        assert process.poll() is None, (folder / "web.log").read_text()
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
        log.close()


@pytest.fixture
def web_server(transactional_db: None, tmp_path: Path) -> Iterator[str]:
    """The Procfile's web server on the test database; its URL."""
    with running_web_server(tmp_path) as url:
        yield url


def test_the_procfiles_web_command_is_a_stock_gunicorn_on_config_wsgi() -> None:
    command = procfile()["web"]
    assert command.startswith("exec python -m gunicorn config.wsgi ")
    assert "bench" not in command


def test_one_server_answers_the_agent_api_and_mcp_on_one_origin(web_server: str, make_agent: AgentFactory) -> None:
    token = make_agent("box-office-agent", {"search_seats": 0})[1]

    async def over_mcp() -> tuple[list[str], dict[str, object]]:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http,
            streamable_http_client(f"{web_server}/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            tools = await session.list_tools()
            called = await session.call_tool("search_seats", SEATS, meta=NO_WAIT)
            return [tool.name for tool in tools.tools], called.structured_content or {}

    names, call = asyncio.run(over_mcp())
    assert "search_seats" in names
    assert call["status"] == "approved"
    rest = httpx.get(f"{web_server}/api/v1/tool-calls/{call['id']}", headers={"Authorization": f"Bearer {token}"})
    assert (rest.status_code, rest.json()["id"]) == (200, call["id"])
    login = httpx.get(f"{web_server}/accounts/login/")
    assert login.status_code == 200


def test_mcp_without_a_token_is_challenged_with_this_origins_resource_metadata(web_server: str) -> None:
    answer = httpx.post(f"{web_server}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert answer.status_code == 401  # not 503: the SDK's session manager was started in the server process
    assert f"{web_server}/.well-known/oauth-protected-resource/mcp" in answer.headers["www-authenticate"]


def test_keep_alive_requests_are_answered_without_a_delayed_ack_wait(web_server: str) -> None:
    # Without TCP_NODELAY a keep-alive response's second write waits for the client's delayed ACK (~40 ms).
    connection = http.client.HTTPConnection(web_server.removeprefix("http://"), timeout=5)
    timings = []
    for _ in range(20):
        started = time.perf_counter()
        connection.request("GET", "/healthz/live")
        response = connection.getresponse()
        response.read()
        timings.append(time.perf_counter() - started)
        assert response.status == 200 and not response.will_close
    connection.close()
    assert sorted(timings)[len(timings) // 2] < 0.02


def _connect(url: str) -> socket.socket:
    address = urlsplit(url)
    return socket.create_connection((address.hostname, address.port), timeout=ANSWER_TIMEOUT)


@pytest.mark.parametrize("path", ["/api/v1/tool-calls", "/mcp"])
def test_a_chunked_api_body_is_refused_with_413_json_once_it_crosses_the_limit(
    path: str, web_server: str, make_agent: AgentFactory
) -> None:
    token = make_agent("support-agent", {"emitir_estorno": 3})[1]
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    with _connect(web_server) as sock:
        sock.sendall(request_head(path, token, "Transfer-Encoding: chunked"))
        for _ in range(limit // CHUNK + 1):  # one chunk past the limit, and no final chunk: never finished
            sock.sendall(chunk(b" " * CHUNK))
        status, headers, body = answer(sock)
    assert (status, headers["content-type"]) == (413, "application/json")
    assert body["error"] == "payload_too_large" and str(limit) in body["message"]


def test_a_chunked_api_body_under_the_limit_reaches_the_api_whole(web_server: str, make_agent: AgentFactory) -> None:
    token = make_agent("support-agent", {"emitir_estorno": 3})[1]
    body = json.dumps(refund(30000, idempotency_key="k-chunked", justification="x" * 5000)).encode()
    with _connect(web_server) as sock:
        sock.sendall(request_head("/api/v1/tool-calls", token, "Transfer-Encoding: chunked"))
        for start in range(0, len(body), 1000):
            sock.sendall(chunk(body[start : start + 1000]))
        sock.sendall(b"0\r\n\r\n")
        status, _, call = answer(sock)
    assert status == 202
    assert call["arguments"]["valor_centavos"] == 30000


class ProxiedConnection(http.client.HTTPConnection):
    """A connection that starts, as a reverse proxy's would, with a PROXY protocol v1 line naming the client."""

    def __init__(self, url: str, client: str) -> None:
        super().__init__(url.removeprefix("http://"), timeout=10)
        self.client = client

    def connect(self) -> None:
        super().connect()
        assert self.sock is not None
        self.sock.sendall(f"PROXY TCP4 {self.client} 127.0.0.1 40000 80\r\n".encode())


def test_behind_a_proxy_sending_the_proxy_protocol_logins_are_throttled_by_the_clients_address(
    transactional_db: None, tmp_path: Path
) -> None:
    from axes.models import AccessAttempt

    proxy = {"GUNICORN_CMD_ARGS": "--proxy-protocol v1 --proxy-allow-from 127.0.0.1"}  # as docs/deploy.md says
    with running_web_server(tmp_path, **proxy) as url:
        # gunicorn reads the PROXY line of a connection's first request only: one request per connection.
        page = ProxiedConnection(url, "203.0.113.9")
        page.request("GET", "/accounts/login/")
        answer = page.getresponse()
        answer.read()
        page.close()
        token = next(c.split(";")[0].split("=", 1)[1] for c in answer.headers.get_all("Set-Cookie") if "csrftoken" in c)
        form = f"username=alice&password=wrong&csrfmiddlewaretoken={token}"
        headers = {"Content-Type": "application/x-www-form-urlencoded", "Cookie": f"csrftoken={token}"}
        login = ProxiedConnection(url, "203.0.113.9")
        login.request("POST", "/accounts/login/", body=form, headers=headers)
        login.getresponse().read()
        login.close()
    assert list(AccessAttempt.objects.values_list("ip_address", flat=True)) == ["203.0.113.9"]
