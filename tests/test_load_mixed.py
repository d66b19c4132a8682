"""One logical call proposed 100 times at once, half over REST and half over MCP: one call, one effect."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from approvals.models import ToolCall
from demo.models import Refund
from tests.conftest import AgentFactory
from tests.mcp_server import LiveAsgi
from tests.processes import wait_until

pytestmark = pytest.mark.worker

ARGUMENTS = {"pedido_id": "PED-00000008", "valor_centavos": 4200, "motivo": "atraso_entrega"}
KEY = "k-rest-and-mcp"


async def over_rest(url: str, token: str) -> str:
    async with httpx.AsyncClient(timeout=60) as client:
        response = await client.post(
            f"{url}/api/v1/tool-calls",
            json={"tool": "emitir_estorno", "arguments": ARGUMENTS, "idempotency_key": KEY},
            headers={"Authorization": f"Bearer {token}"},
        )
    assert response.status_code in (200, 201), response.text
    return response.json()["id"]


async def over_mcp(url: str, token: str) -> str:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http), mode="auto") as client,
    ):
        meta = {"gatehouse/idempotency_key": KEY, "gatehouse/wait_seconds": 0}
        result = await client.call_tool("emitir_estorno", ARGUMENTS, meta=meta)
    assert result.is_error is False, result.content
    return result.structured_content["id"]


async def everyone(live: LiveAsgi, token: str) -> list[str]:
    proposals: list[Any] = [over_rest(live.url, token) for _ in range(50)]
    proposals += [over_mcp(live.mcp_url, token) for _ in range(50)]
    return await asyncio.gather(*proposals)


def test_one_hundred_identical_proposals_over_rest_and_mcp_make_one_call_and_one_refund(
    live_asgi: LiveAsgi, make_agent: AgentFactory, celery_worker: Any, demo_services: str
) -> None:
    _, token = make_agent("support-agent", {"emitir_estorno": 3})
    ids = asyncio.run(everyone(live_asgi, token))

    assert len(ids) == 100 and len(set(ids)) == 1
    assert ToolCall.objects.count() == 1
    call = wait_until(lambda: ToolCall.objects.filter(pk=ids[0], status="succeeded").first(), timeout=30)
    assert call.attempts == 1
    assert Refund.objects.filter(order__order_id="PED-00000008").count() == 1
