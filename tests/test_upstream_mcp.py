"""Agents reach upstream tools through Gatehouse's one /mcp endpoint: listed with annotations, called through
the pipeline, and told (list_changed) when a sync changes what they see."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import pytest
from django.db import connection

from agents.provisioning import create_or_update_agent
from tests.processes import CeleryWorker
from tests.test_mcp import auto_client, run
from tests.upstream_peers import HOLD, SEARCH, Peer
from toolcatalog.models import Tool
from toolcatalog.upstreams import Upstream
from toolcatalog.upstreams_sync import sync

pytestmark = pytest.mark.worker


@pytest.fixture
def box_agent(http_peer: Peer, catalog: dict[str, Any]) -> str:
    """The upstream `box` synced, and an agent granted its two tools; returns the agent's token."""
    http_peer.offer(SEARCH, HOLD)
    sync(http_peer.register("box"))
    _, token = create_or_update_agent("box-agent", {"box_search_seats": 0, "box_hold_seats": 1})
    return token


def resync(peer: Peer, *tools: dict[str, Any]) -> None:
    """Change what the upstream offers and sync it (from a thread of its own, as the beat would)."""
    try:
        peer.offer(*tools)
        sync(Upstream.objects.get(name="box"))
    finally:
        connection.close()


def test_an_agent_lists_upstream_tools_with_their_annotations_and_calls_one(
    live_asgi: Any, box_agent: str, http_peer: Peer, celery_worker: CeleryWorker
) -> None:
    async def scenario() -> tuple[Any, Any]:
        async with auto_client(live_asgi.mcp_url, box_agent) as client:
            listed = await client.list_tools()
            called = await client.call_tool(
                "box_search_seats", {"event_id": "EV-2"}, meta={"gatehouse/wait_seconds": 20}
            )
            return listed, called

    listed, called = run(scenario())
    tools = {tool.name: tool for tool in listed.tools}
    assert {"box_search_seats", "box_hold_seats"} <= set(tools)
    assert tools["box_search_seats"].annotations.read_only_hint is True
    assert tools["box_hold_seats"].annotations.destructive_hint is False
    assert tools["box_search_seats"].input_schema == SEARCH["inputSchema"]
    assert called.is_error is False, called
    assert called.structured_content["status"] == "succeeded", celery_worker.log()
    assert called.structured_content["result"]["structuredContent"]["arguments"] == {"event_id": "EV-2"}
    assert http_peer.calls() == [{"name": "search_seats", "arguments": {"event_id": "EV-2"}}]


def test_a_sync_that_changes_what_an_agent_sees_sends_list_changed(
    live_asgi: Any, box_agent: str, http_peer: Peer, settings: Any
) -> None:
    settings.GATEHOUSE_MCP_CATALOG_POLL_SECONDS = 0.2

    async def scenario() -> tuple[object, list[str]]:
        async with auto_client(live_asgi.mcp_url, box_agent) as client:
            async with client.listen(tools_list_changed=True) as subscription:
                await asyncio.to_thread(resync, http_peer, SEARCH)
                with anyio.fail_after(10):
                    event = await subscription.__anext__()
            names = [tool.name for tool in (await client.list_tools()).tools]
        return event, names

    event, names = run(scenario())
    assert type(event).__name__ == "ToolsListChanged"
    assert "box_hold_seats" not in names and "box_search_seats" in names
    assert Tool.objects.get(name="box_hold_seats").enabled is False
