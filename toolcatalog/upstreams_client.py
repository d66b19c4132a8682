"""Talking to an upstream MCP server with the official SDK: list its tools, call one.

Callers are synchronous (a worker, a command, an admin action), so each function
here runs one short event loop of its own: connect, one or more requests, close.
A stdio upstream is started for the session and ends with it.

Every failure becomes an `UpstreamError` with one line a person can act on and a
`code`: `unreachable`, `unauthorized`, `not_mcp`, `timeout`, `refused` (the upstream
answered a request with a JSON-RPC error). `sent` says whether a tools/call may have
reached the upstream: MCP has no idempotency key, so a call that may have been
sent must never be sent again without a person (the executor decides).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TypeVar

import anyio
import httpx2
import mcp.types as types
from django.conf import settings
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from audit.typealiases import JSONObject
from toolcatalog.upstreams import Transport, Upstream, ValueKind

R = TypeVar("R")
# Pages of tools/list followed at most: a paginator that never ends cannot hang a sync.
MAX_PAGES = 50
# MCPError codes the SDK itself raises (no answer came): the rest are answers from the upstream.
UNANSWERED_CODES = frozenset({types.REQUEST_TIMEOUT, types.CONNECTION_CLOSED})


def call_timeout() -> float:
    """Seconds to wait for an upstream's answer (below the worker's time limit, so a hang is an outcome)."""
    return float(settings.GATEHOUSE_UPSTREAM_TIMEOUT_SECONDS)


@dataclass(frozen=True)
class Endpoint:
    """Everything needed to reach one upstream, read from the database before any I/O."""

    name: str
    transport: str
    url: str
    argv: tuple[str, ...]
    headers: tuple[tuple[str, str], ...]
    env: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, upstream: Upstream) -> Endpoint:
        values = list(upstream.values.all())
        return cls(
            name=upstream.name,
            transport=upstream.transport,
            url=upstream.url,
            argv=tuple(upstream.argv()) if upstream.transport == Transport.STDIO else (),
            headers=tuple((v.name, v.value or "") for v in values if v.kind == ValueKind.HEADER),
            env=tuple((v.name, v.value or "") for v in values if v.kind == ValueKind.ENV),
        )

    def where(self) -> str:
        """Where the upstream is, for messages: its URL or its program, never a header or variable value."""
        return f"stdio:{self.argv[0]}" if self.transport == Transport.STDIO and self.argv else self.url


class UpstreamError(Exception):
    """A failed exchange with an upstream: one line for a person, a code, and whether a call may have been sent."""

    def __init__(self, code: str, message: str, *, sent: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.sent = sent


@dataclass
class Exchange:
    """What the HTTP layer saw during one session (the SDK reports an HTTP refusal without its status)."""

    statuses: list[int]

    async def on_response(self, response: httpx2.Response) -> None:
        if response.status_code >= 400:
            self.statuses.append(response.status_code)


@asynccontextmanager
async def session(endpoint: Endpoint, timeout: float, exchange: Exchange) -> AsyncIterator[Client]:
    """Open a client session to the upstream (starting it, for stdio); close it on exit."""
    if endpoint.transport == Transport.STDIO:
        params = StdioServerParameters(command=endpoint.argv[0], args=list(endpoint.argv[1:]), env=dict(endpoint.env))
        async with Client(stdio_client(params), read_timeout_seconds=timeout, cache=None) as client:
            yield client
        return
    http = create_mcp_http_client(headers=dict(endpoint.headers), timeout=httpx2.Timeout(timeout))
    http.event_hooks["response"] = [exchange.on_response]
    async with (
        http,
        Client(
            streamable_http_client(endpoint.url, http_client=http), read_timeout_seconds=timeout, cache=None
        ) as client,
    ):
        yield client


def leaves(exc: BaseException) -> Iterator[BaseException]:
    """Yield the exceptions inside task-group exception groups (the SDK raises through several)."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from leaves(inner)
    else:
        yield exc


def classify(exc: BaseException, endpoint: Endpoint, exchange: Exchange, *, sending: bool) -> UpstreamError:
    """Return the UpstreamError an exception means; `sending`: it happened during a tools/call."""
    where = endpoint.where()
    found = list(leaves(exc))
    if any(isinstance(e, UpstreamError) for e in found):
        return next(e for e in found if isinstance(e, UpstreamError))
    if any(s in (401, 403) for s in exchange.statuses):
        return UpstreamError("unauthorized", f"{where} refused Gatehouse's credentials (HTTP {exchange.statuses[-1]})")
    if any(
        isinstance(e, httpx2.ConnectError | httpx2.ConnectTimeout | FileNotFoundError | PermissionError) for e in found
    ):
        detail = next(str(e) for e in found if isinstance(e, Exception))
        return UpstreamError("unreachable", f"{where} is unreachable: {detail or 'connection refused'}")
    if exchange.statuses and exchange.statuses[-1] < 500:
        return UpstreamError("not_mcp", f"{where} is not an MCP endpoint (HTTP {exchange.statuses[-1]})")
    for error in found:
        if isinstance(error, MCPError) and error.code not in UNANSWERED_CODES and not exchange.statuses:
            if sending:
                return UpstreamError("refused", f"{where} answered with an error: {error.error.message}", sent=True)
            return UpstreamError("not_mcp", f"{where} did not answer as an MCP server: {error.error.message}")
        if isinstance(error, ValidationError | ValueError) and not sending:
            return UpstreamError("not_mcp", f"{where} did not answer as an MCP server ({type(error).__name__})")
    if any(isinstance(e, TimeoutError | httpx2.TimeoutException) or _timed_out(e) for e in found):
        return UpstreamError("timeout", f"{where} did not answer in time", sent=sending)
    first = found[0] if found else exc
    return UpstreamError(
        "unreachable", f"{where}: the connection failed ({type(first).__name__}: {first})", sent=sending
    )


def _timed_out(error: BaseException) -> bool:
    return isinstance(error, MCPError) and error.code == types.REQUEST_TIMEOUT


def run(endpoint: Endpoint, work: Callable[[Client], Awaitable[R]], *, sending: bool = False) -> R:
    """Open a session, run `work` on it, close it; raise UpstreamError on any failure."""
    timeout = call_timeout()
    exchange = Exchange(statuses=[])

    async def main() -> R:
        # The whole exchange is bounded too: a server that accepts and never answers the handshake.
        with anyio.fail_after(timeout * 2 + 5):
            async with session(endpoint, timeout, exchange) as client:
                return await work(client)

    try:
        return anyio.run(main)
    except UpstreamError:
        raise
    except Exception as exc:
        raise classify(exc, endpoint, exchange, sending=sending) from exc


def list_tools(endpoint: Endpoint) -> list[types.Tool]:
    """Return every tool the upstream lists (following pages)."""

    async def work(client: Client) -> list[types.Tool]:
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await client.list_tools(cursor=cursor, cache_mode="refresh")
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                return tools
        raise UpstreamError("not_mcp", f"{endpoint.where()} lists more than {MAX_PAGES} pages of tools")

    return run(endpoint, work)


class Sending:
    """Marks the moment a tools/call leaves: before it, a failure is safe to retry; after it, it is not."""

    def __init__(self) -> None:
        self.started = False


def call_tool(endpoint: Endpoint, name: str, arguments: JSONObject) -> types.CallToolResult:
    """Send one tools/call with exactly `arguments`; return the upstream's result (isError included).

    A failure while connecting is raised with `sent=False`; once the request is
    under way, with `sent=True` unless the connection was refused outright.
    """
    sending = Sending()

    async def work(client: Client) -> types.CallToolResult:
        sending.started = True
        return await client.call_tool(name, arguments)

    try:
        return run(endpoint, work, sending=True)
    except UpstreamError as error:
        if not sending.started or (error.code == "unreachable" and _refused_outright(error)):
            error.sent = False
        raise


def _refused_outright(error: UpstreamError) -> bool:
    """A connection refused for the tools/call itself (HTTP: each request connects anew): it never left."""
    cause = error.__cause__
    return cause is not None and any(isinstance(e, httpx2.ConnectError) for e in leaves(cause))
