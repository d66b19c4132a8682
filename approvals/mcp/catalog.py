"""`notifications/tools/list_changed`, where the protocol allows it.

Gatehouse serves MCP statelessly, so a handshake-era (2025-*) client has no
standing stream to be told anything on: those clients get `listChanged: false`
and should re-list when they start a task. On the 2026-07-28 protocol a client
opens `subscriptions/listen` and the response *is* the stream; the SDK's
`ListenHandler` serves it and advertises `listChanged: true`. Gatehouse watches
the catalog in the database — so an admin's edit in any process counts — and
tells every open stream when it changed (the client re-lists; the list itself is
scoped to its agent).

The watcher polls only while at least one stream is open.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import anyio.lowlevel
import mcp.types as types
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DatabaseError, connection
from mcp.server import ServerRequestContext
from mcp.server.subscriptions import ListenHandler, ServerEvent, ToolsListChanged
from starlette.requests import Request

from agents.models import Grant
from audit.typealiases import JSONObject
from toolcatalog.models import Tool

log = logging.getLogger(__name__)


class CatalogBus:
    """In-process fan-out of change events to open listen streams (a `SubscriptionBus`).

    Each web process watches the shared database itself, so no cross-process bus is needed.
    """

    def __init__(self) -> None:
        self._listeners: dict[object, Callable[[ServerEvent], None]] = {}

    @property
    def listening(self) -> bool:
        return bool(self._listeners)

    async def publish(self, event: ServerEvent) -> None:
        """Deliver `event` to every open stream."""
        for listener in list(self._listeners.values()):
            listener(event)  # ListenHandler's listeners never raise: a full stream is simply ended
        await anyio.lowlevel.checkpoint()

    def subscribe(self, listener: Callable[[ServerEvent], None]) -> Callable[[], None]:
        """Register `listener`; return its unsubscribe callable."""
        token = object()
        self._listeners[token] = listener

        def unsubscribe() -> None:
            self._listeners.pop(token, None)

        return unsubscribe


def catalog_fingerprint() -> str:
    """Return a digest of everything tools/list depends on: tools (version, enabled) and grants."""
    try:
        tools = list(Tool.objects.order_by("pk").values_list("pk", "version", "enabled", "updated_at"))
        grants = list(Grant.objects.order_by("pk").values_list("pk", "agent_id", "tool_id"))
    finally:
        connection.close()  # called from a long-lived thread: give the connection back at once
    return hashlib.sha256(repr((tools, grants)).encode()).hexdigest()


class CatalogWatcher:
    """Polls the catalog fingerprint while streams are open and publishes ToolsListChanged on a change."""

    def __init__(self, bus: CatalogBus) -> None:
        self.bus = bus
        self.last: str | None = None

    async def baseline(self) -> None:
        """Record the current catalog before a stream is acknowledged, so no later change is missed.

        With other streams open the poller keeps `last` current; with none, it may be stale.
        """
        if self.last is None or not self.bus.listening:
            self.last = await sync_to_async(catalog_fingerprint)()

    async def run(self) -> None:
        """Poll forever (cancelled at shutdown)."""
        while True:
            await anyio.sleep(settings.GATEHOUSE_MCP_CATALOG_POLL_SECONDS)
            if not self.bus.listening:
                self.last = None
                continue
            try:
                await self.check()
            except DatabaseError:
                log.warning("catalog watcher cannot read the database; retrying")

    async def check(self) -> None:
        """Publish ToolsListChanged if the catalog differs from the last look."""
        current = await sync_to_async(catalog_fingerprint)()
        if self.last is not None and current != self.last:
            log.info("tool catalog changed; notifying open MCP listen streams")
            await self.bus.publish(ToolsListChanged())
        self.last = current


class CatalogChanges:
    """One MCP server's list_changed support: the bus, the watcher and the listen handler."""

    def __init__(self) -> None:
        self.bus = CatalogBus()
        self.watcher = CatalogWatcher(self.bus)
        self._listen = ListenHandler(self.bus)

    async def listen(
        self, ctx: ServerRequestContext[JSONObject, Request], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        """Serve subscriptions/listen (2026-07-28): the SDK's handler, after taking a catalog baseline."""
        await self.watcher.baseline()
        return await self._listen(ctx, params)

    @asynccontextmanager
    async def lifespan(self, server: object) -> AsyncIterator[JSONObject]:
        """Run the catalog watcher for as long as the MCP server runs."""
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self.watcher.run)
            try:
                yield {}
            finally:
                self._listen.close()
                tasks.cancel_scope.cancel()
