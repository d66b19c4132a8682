"""Bodies over the limit are refused at the limit by the real ASGI server, chunked or sized.

A raw socket sends the request: the body is left unfinished on purpose, so an answer
at all proves the server refused at the limit instead of reading the whole body first.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from http.client import HTTPResponse
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.conf import settings

from tests.conftest import refund
from tests.mcp_server import LiveAsgi

CHUNK = 64 * 1024
# Long enough for a loaded machine; a server that waits for the rest of the body never answers at all.
ANSWER_TIMEOUT = 60


@contextmanager
def connected(live: LiveAsgi) -> Iterator[socket.socket]:
    address = urlsplit(live.url)
    with socket.create_connection((address.hostname, address.port), timeout=ANSWER_TIMEOUT) as sock:
        yield sock


def request_head(path: str, token: str, framing: str) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: 127.0.0.1",
        f"Authorization: Bearer {token}",
        "Content-Type: application/json",
        "Accept: application/json, text/event-stream",
        framing,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def answer(sock: socket.socket) -> tuple[int, dict[str, str], Any]:
    response = HTTPResponse(sock)
    response.begin()
    body = response.read()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, json.loads(body)


@pytest.fixture
def token(live_asgi: LiveAsgi, make_agent: Any) -> str:
    return make_agent("support-agent", {"emitir_estorno": 3})[1]


@pytest.mark.parametrize("path", ["/api/v1/tool-calls", "/mcp"])
def test_a_chunked_body_is_refused_with_413_json_once_it_crosses_the_limit(
    path: str, live_asgi: LiveAsgi, token: str, caplog: pytest.LogCaptureFixture
) -> None:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    with caplog.at_level(logging.INFO), connected(live_asgi) as sock:
        sock.sendall(request_head(path, token, "Transfer-Encoding: chunked"))
        for _ in range(limit // CHUNK + 1):  # one chunk past the limit, and no final chunk: never finished
            sock.sendall(chunk(b" " * CHUNK))
        status, headers, body = answer(sock)
    assert status == 413
    assert headers["content-type"] == "application/json"
    assert body["error"] == "payload_too_large" and str(limit) in body["message"]
    assert [record for record in caplog.records if record.levelno >= logging.ERROR] == []


def test_a_declared_length_over_the_limit_is_refused_before_the_body_is_read(
    live_asgi: LiveAsgi, token: str, caplog: pytest.LogCaptureFixture
) -> None:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    with caplog.at_level(logging.INFO), connected(live_asgi) as sock:
        sock.sendall(request_head("/api/v1/tool-calls", token, f"Content-Length: {2 * limit}"))
        sock.sendall(b"{")  # the rest never comes
        status, _, body = answer(sock)
    assert status == 413
    assert body["error"] == "payload_too_large"
    assert [record for record in caplog.records if record.levelno >= logging.ERROR] == []


def test_a_chunked_body_under_the_limit_reaches_the_api_whole(live_asgi: LiveAsgi, token: str) -> None:
    body = json.dumps(refund(30000, idempotency_key="k-chunked", justification="x" * 5000)).encode()
    with connected(live_asgi) as sock:
        sock.sendall(request_head("/api/v1/tool-calls", token, "Transfer-Encoding: chunked"))
        for start in range(0, len(body), 1000):
            sock.sendall(chunk(body[start : start + 1000]))
        sock.sendall(b"0\r\n\r\n")
        status, _, call = answer(sock)
    assert status == 202
    assert call["arguments"]["valor_centavos"] == 30000


def test_a_chunked_body_of_exactly_the_limit_is_read_and_judged(live_asgi: LiveAsgi, token: str) -> None:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    with connected(live_asgi) as sock:
        sock.sendall(request_head("/api/v1/tool-calls", token, "Transfer-Encoding: chunked"))
        for _ in range(limit // CHUNK):
            sock.sendall(chunk(b" " * CHUNK))
        sock.sendall(b"0\r\n\r\n")
        status, _, body = answer(sock)
    assert status == 400
    assert body["error"] == "malformed_request"
