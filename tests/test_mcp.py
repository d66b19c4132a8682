"""`/mcp` against a live ASGI server, driven by the official SDK's clients.

`ClientSession` speaks the handshake-era protocol (2025-11-25, `initialize`);
`mcp.Client` in its default `mode="auto"` probes `server/discover` and speaks
2026-07-28. Both go through the same HTTP wrapper and the same pipeline.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import httpx
import httpx2
import mcp.types as types
import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client

from approvals import lifecycle
from approvals.models import Status, ToolCall
from tests.conftest import AgentFactory, start_of_a_fresh_window
from tests.mcp_server import LiveAsgi

T = TypeVar("T")
NO_WAIT = {"gatehouse/wait_seconds": 0}  # no worker runs in these tests: do not wait for execution
REFUND = {"pedido_id": "PED-00000001", "valor_centavos": 30000, "motivo": "atraso_entrega"}


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


@asynccontextmanager
async def legacy_session(url: str, token: str) -> AsyncIterator[ClientSession]:
    """A handshake-era ClientSession (initialize, then requests) authenticated with `token`."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@asynccontextmanager
async def auto_client(url: str, token: str) -> AsyncIterator[Client]:
    """An `mcp.Client` in its default auto mode, authenticated with `token`."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http,
        Client(streamable_http_client(url, http_client=http), mode="auto") as client,
    ):
        yield client


def rpc(url: str, body: Any, token: str | None = None, **headers: str) -> httpx.Response:
    """POST one raw JSON-RPC body (str bodies are sent as they are)."""
    sent = {"content-type": "application/json", "accept": "application/json, text/event-stream", **headers}
    if token:
        sent["authorization"] = f"Bearer {token}"
    content = body if isinstance(body, str) else json.dumps(body)
    return httpx.post(url, content=content, headers=sent, timeout=10)


def reviewer() -> User:
    user = User.objects.create_user("rita", password="x")
    user.user_permissions.add(Permission.objects.get(codename="review_toolcall"))
    return User.objects.get(pk=user.pk)  # fresh: permissions are cached per instance


@pytest.fixture
def box_office(make_agent: AgentFactory) -> str:
    return make_agent("box-office-agent", {"search_seats": 0, "hold_seats": 1, "release_hold": 1})[1]


@pytest.fixture
def support(make_agent: AgentFactory) -> str:
    return make_agent("support-agent", {"emitir_estorno": 3, "get_order_status": 0})[1]


def test_both_sdk_clients_list_this_agents_tools_with_annotations(live_asgi: LiveAsgi, box_office: str) -> None:
    async def scenario() -> tuple[types.ListToolsResult, types.ListToolsResult, str, str]:
        async with legacy_session(live_asgi.mcp_url, box_office) as session:
            legacy = await session.list_tools()
            legacy_version = session.protocol_version
        async with auto_client(live_asgi.mcp_url, box_office) as client:
            modern = await client.list_tools()
            modern_version = client.protocol_version
        return legacy, modern, legacy_version, modern_version

    legacy, modern, legacy_version, modern_version = run(scenario())
    assert (legacy_version, modern_version) == ("2025-11-25", "2026-07-28")
    for listing in (legacy, modern):
        names = [tool.name for tool in listing.tools]
        assert names == ["hold_seats", "release_hold", "search_seats", "get_call_status"]
        hold = listing.tools[0]
        assert hold.input_schema["required"] == ["event_id", "seat_ids", "idempotency_key"]
        assert hold.annotations is not None
        assert (hold.annotations.read_only_hint, hold.annotations.destructive_hint) == (False, False)
        assert (hold.annotations.idempotent_hint, hold.annotations.title) == (True, "Hold seats")
        assert listing.tools[2].annotations.read_only_hint is True


def test_both_sdk_clients_call_a_tool_through_the_pipeline_and_get_its_result(
    live_asgi: LiveAsgi, box_office: str, celery_worker: Any, demo_services: str
) -> None:
    arguments = {"event_id": "show-sabado", "quantity": 2, "max_price_brl": 299.99}

    async def scenario() -> list[types.CallToolResult]:
        async with legacy_session(live_asgi.mcp_url, box_office) as session:
            first = await session.call_tool("search_seats", arguments)
        async with auto_client(live_asgi.mcp_url, box_office) as client:
            second = await client.call_tool("search_seats", arguments)
        return [first, second]

    results = run(scenario())  # the default short wait lets an auto-approved call finish
    calls = ToolCall.objects.filter(tool__name="search_seats").order_by("created_at")
    assert [str(call.pk) for call in calls] == [result.structured_content["id"] for result in results]
    for result in results:
        body = result.structured_content
        assert (result.is_error, body["status"], body["arguments"]) == (False, "succeeded", arguments)
        assert body["result"]["options"][0]["price_brl"] < 300
        assert result.content[0].text.startswith("search_seats succeeded")
        assert json.loads(result.content[1].text) == body  # the REST call body, as JSON text


def test_an_agent_never_sees_or_calls_a_tool_outside_its_grants(live_asgi: LiveAsgi, make_agent: AgentFactory) -> None:
    _, visitor = make_agent("visitor", {"search_seats": 0})
    make_agent("box-office-agent", {"hold_seats": 1})  # the tool exists, granted to someone else

    async def scenario() -> tuple[list[str], list[types.CallToolResult]]:
        async with auto_client(live_asgi.mcp_url, visitor) as client:
            names = [tool.name for tool in (await client.list_tools()).tools]
            hold = await client.call_tool("hold_seats", {"event_id": "e", "seat_ids": ["A1"], "idempotency_key": "k"})
            ghost = await client.call_tool("launch_rockets", {})
        return names, [hold, ghost]

    names, refusals = run(scenario())
    assert names == ["search_seats", "get_call_status"]
    for result in refusals:
        assert result.is_error is True
        assert result.structured_content["error"] == "unknown_or_not_permitted_tool"
    assert refusals[0].structured_content == refusals[1].structured_content  # existence is not revealed
    assert not ToolCall.objects.filter(tool__name="hold_seats").exists()


def test_a_disabled_tool_disappears_from_the_list(live_asgi: LiveAsgi, box_office: str, catalog: dict) -> None:
    catalog["release_hold"].enabled = False
    catalog["release_hold"].save()

    async def scenario() -> list[str]:
        async with legacy_session(live_asgi.mcp_url, box_office) as session:
            return [tool.name for tool in (await session.list_tools()).tools]

    assert "release_hold" not in run(scenario())


def test_invalid_arguments_come_back_as_an_error_result_naming_every_field(live_asgi: LiveAsgi, support: str) -> None:
    bad = {"pedido_id": "123", "valor_centavos": 30000, "motivo": "porque_sim"}

    async def scenario() -> types.CallToolResult:
        async with legacy_session(live_asgi.mcp_url, support) as session:
            return await session.call_tool("emitir_estorno", bad, meta={"gatehouse/idempotency_key": "k-bad"})

    result = run(scenario())
    body = result.structured_content
    assert result.is_error is True
    assert body["error"] == "invalid_arguments"
    assert {problem["field"] for problem in body["errors"]} == {"pedido_id", "motivo"}
    assert json.loads(result.content[0].text) == body


def test_a_call_above_the_agents_tier_is_permission_denied(live_asgi: LiveAsgi, make_agent: AgentFactory) -> None:
    _, token = make_agent("support-agent", {"emitir_estorno": 1})

    async def scenario() -> types.CallToolResult:
        async with auto_client(live_asgi.mcp_url, token) as client:
            return await client.call_tool("emitir_estorno", REFUND, meta={"gatehouse/idempotency_key": "k-deny"})

    result = run(scenario())
    assert result.is_error is True
    assert result.structured_content["error"] == "permission_denied"
    assert result.structured_content["risk_tier"] == 2


def test_pending_approval_says_how_to_get_the_outcome_and_a_repeat_is_a_replay(
    live_asgi: LiveAsgi, support: str
) -> None:
    meta = {"gatehouse/idempotency_key": "k-pending", "gatehouse/justification": "late delivery"}

    async def scenario() -> list[types.CallToolResult]:
        async with auto_client(live_asgi.mcp_url, support) as client:
            first = await client.call_tool("emitir_estorno", REFUND, meta=meta)
            status = await client.call_tool("get_call_status", {"call_id": first.structured_content["id"]})
            again = await client.call_tool("emitir_estorno", REFUND, meta=meta)
            other = await client.call_tool("emitir_estorno", {**REFUND, "valor_centavos": 30001}, meta=meta)
        return [first, status, again, other]

    first, status, again, other = run(scenario())
    call = ToolCall.objects.get()
    assert first.is_error is False
    assert first.structured_content["status"] == "pending_approval"
    assert first.structured_content["id"] == str(call.pk)
    assert "has NOT run" in first.content[0].text and "get_call_status" in first.content[0].text
    assert first.meta["gatehouse/replayed"] is False
    assert status.structured_content == first.structured_content
    assert again.structured_content["id"] == str(call.pk) and again.meta["gatehouse/replayed"] is True
    assert again.content[0].text.startswith("Replayed:")
    assert other.is_error is True and other.structured_content["error"] == "idempotency_conflict"
    assert call.justification == "late delivery" and call.idempotency_key == "k-pending"


def test_a_rejection_comes_back_with_the_reviewers_reason(live_asgi: LiveAsgi, support: str) -> None:
    meta = {"gatehouse/conversation_id": "conv-1", "gatehouse/step": 0, "gatehouse/call_index": 0}

    async def propose() -> types.CallToolResult:
        async with legacy_session(live_asgi.mcp_url, support) as session:
            return await session.call_tool("emitir_estorno", REFUND, meta=meta)

    pending = run(propose())
    call = ToolCall.objects.get(pk=pending.structured_content["id"])
    assert lifecycle.reject(call, reviewer(), "Order was refunded by phone already.")

    async def follow_up() -> list[types.CallToolResult]:
        async with legacy_session(live_asgi.mcp_url, support) as session:
            status = await session.call_tool("get_call_status", {"call_id": str(call.pk)})
            repeat = await session.call_tool("emitir_estorno", REFUND, meta=meta)
        return [status, repeat]

    for result in run(follow_up()):
        assert result.is_error is True
        assert result.structured_content["status"] == "rejected"
        assert result.structured_content["error"]["reason"] == "Order was refunded by phone already."
        assert "refunded by phone" in result.content[0].text
    assert ToolCall.objects.get(pk=call.pk).status == Status.REJECTED
    assert ToolCall.objects.count() == 1  # conversation/step/call derived the same key: no second call


def test_get_call_status_does_not_reveal_other_agents_calls(
    live_asgi: LiveAsgi, support: str, make_agent: AgentFactory
) -> None:
    _, intruder = make_agent("intruder", {"get_order_status": 0})

    async def scenario() -> types.CallToolResult:
        async with auto_client(live_asgi.mcp_url, support) as client:
            pending = await client.call_tool("emitir_estorno", REFUND, meta={"gatehouse/idempotency_key": "k-own"})
        async with auto_client(live_asgi.mcp_url, intruder) as client:
            return await client.call_tool("get_call_status", {"call_id": pending.structured_content["id"]})

    result = run(scenario())
    assert result.is_error is True and result.structured_content["error"] == "not_found"


def test_bad_gatehouse_meta_is_a_malformed_request(live_asgi: LiveAsgi, support: str) -> None:
    async def scenario() -> list[types.CallToolResult]:
        async with auto_client(live_asgi.mcp_url, support) as client:
            typo = await client.call_tool("emitir_estorno", REFUND, meta={"gatehouse/idempotencyKey": "k"})
            negative = await client.call_tool(
                "emitir_estorno",
                REFUND,
                meta={"gatehouse/conversation_id": "c", "gatehouse/step": -1, "gatehouse/call_index": 0},
            )
        return [typo, negative]

    typo, negative = run(scenario())
    assert typo.structured_content["error"] == "malformed_request"
    assert typo.structured_content["errors"][0]["field"] == "_meta.gatehouse/idempotencyKey"
    assert negative.structured_content["error"] == "malformed_request"
    assert negative.structured_content["errors"][0]["field"] == "_meta.gatehouse/step"
    assert not ToolCall.objects.exists()


def test_a_tools_output_schema_is_advertised_inside_the_call_envelope(
    live_asgi: LiveAsgi, box_office: str, catalog: dict
) -> None:
    seats = {"type": "object", "properties": {"options": {"type": "array"}}, "required": ["options"]}
    catalog["search_seats"].output_schema = seats
    catalog["search_seats"].save()

    async def scenario() -> types.Tool:
        async with auto_client(live_asgi.mcp_url, box_office) as client:
            return next(tool for tool in (await client.list_tools()).tools if tool.name == "search_seats")

    schema = run(scenario()).output_schema
    assert schema["required"] == ["id", "tool", "status"]
    assert schema["properties"]["result"]["anyOf"][0] == seats


def test_no_token_or_a_wrong_token_is_401_in_gatehouses_error_shape(live_asgi: LiveAsgi) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    for token in (None, "gh_not-a-real-token"):
        response = rpc(live_asgi.mcp_url, body, token)
        assert response.status_code == 401
        assert response.json()["error"] == "unauthorized"
        assert response.headers["www-authenticate"].startswith("Bearer")


def test_a_foreign_origin_is_403_and_a_foreign_host_421(live_asgi: LiveAsgi, box_office: str) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    foreign = rpc(live_asgi.mcp_url, body, box_office, origin="http://evil.example")
    assert (foreign.status_code, foreign.json()["error"]) == (403, "origin_not_allowed")
    rebinding = rpc(live_asgi.mcp_url, body, box_office, host="evil.example")
    assert (rebinding.status_code, rebinding.json()["error"]) == (421, "host_not_allowed")
    own = rpc(live_asgi.mcp_url, body, box_office, origin=live_asgi.url)
    assert own.status_code == 200 and own.json()["result"]["tools"]


def test_an_origin_listed_in_settings_is_allowed(live_asgi: LiveAsgi, box_office: str, settings: Any) -> None:
    settings.GATEHOUSE_MCP_ALLOWED_ORIGINS = ["https://inspector.example:*"]
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    assert rpc(live_asgi.mcp_url, body, box_office, origin="https://inspector.example:6274").status_code == 200


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("{not json", -32700),
        ('{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "id": 2}', -32700),
        (
            '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x", "arguments": {"a": NaN}}}',
            -32700,
        ),
        ("[]", -32600),
        ('[{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]', -32600),
        ('{"id": 1, "method": "tools/list"}', -32600),
        ('{"jsonrpc": "2.0", "id": 1, "method": 7}', -32600),
        ('{"jsonrpc": "2.0", "id": 1}', -32600),
        ('{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [1]}', -32600),
        ('{"jsonrpc": "2.0", "id": 1, "method": "no/such/method"}', -32601),
        ('{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"arguments": {}}}', -32602),
    ],
)
def test_malformed_json_rpc_gets_the_json_rpc_error_never_a_500(
    live_asgi: LiveAsgi, box_office: str, raw: str, code: int
) -> None:
    response = rpc(live_asgi.mcp_url, raw, box_office)
    assert response.status_code < 500
    assert response.json()["error"]["code"] == code


def disable(tool: Any) -> None:
    """Disable the tool from a worker thread, giving that thread's database connection back after."""
    tool.enabled = False
    try:
        tool.save()
    finally:
        connection.close()  # else the thread keeps a pooled connection past the test database's teardown


def test_tools_list_changed_reaches_a_listening_client_when_the_catalog_changes(
    live_asgi: LiveAsgi, box_office: str, catalog: dict, settings: Any
) -> None:
    settings.GATEHOUSE_MCP_CATALOG_POLL_SECONDS = 0.2

    async def scenario() -> tuple[bool, object, list[str]]:
        async with auto_client(live_asgi.mcp_url, box_office) as client:
            announced = client.server_capabilities.tools.list_changed
            async with client.listen(tools_list_changed=True) as subscription:
                await asyncio.to_thread(disable, catalog["release_hold"])
                with anyio_fail_after(10):
                    event = await subscription.__anext__()
            names = [tool.name for tool in (await client.list_tools()).tools]
        return announced, event, names

    announced, event, names = run(scenario())
    assert announced is True
    assert type(event).__name__ == "ToolsListChanged"
    assert "release_hold" not in names


def test_handshake_era_clients_are_told_honestly_that_nothing_is_pushed(live_asgi: LiveAsgi, box_office: str) -> None:
    async def scenario() -> types.InitializeResult:
        async with legacy_session(live_asgi.mcp_url, box_office) as session:
            return session.initialize_result

    assert run(scenario()).capabilities.tools.list_changed is False


def anyio_fail_after(seconds: float) -> Any:
    import anyio

    return anyio.fail_after(seconds)


def test_the_rest_rate_limit_applies_over_mcp_too(live_asgi: LiveAsgi, box_office: str, settings: Any) -> None:
    import redis

    settings.GATEHOUSE_RATE_LIMIT_PER_MINUTE = 3
    start_of_a_fresh_window()  # the limit counts per minute: four hits across a minute boundary are two windows
    counts = redis.Redis.from_url(settings.GATEHOUSE_REDIS_URL)
    for key in counts.scan_iter("gatehouse:rate:*"):
        counts.delete(key)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    try:
        statuses = [rpc(live_asgi.mcp_url, body, box_office).status_code for _ in range(3)]
        limited = rpc(live_asgi.mcp_url, body, box_office)
    finally:
        for key in counts.scan_iter("gatehouse:rate:*"):
            counts.delete(key)
    assert statuses == [200, 200, 200]
    assert (limited.status_code, limited.json()["error"]) == (429, "rate_limited")
    assert 1 <= int(limited.headers["retry-after"]) <= 60


def test_get_and_delete_are_405_because_the_endpoint_is_stateless(live_asgi: LiveAsgi, box_office: str) -> None:
    headers = {"authorization": f"Bearer {box_office}", "accept": "application/json, text/event-stream"}
    for method in ("GET", "DELETE"):
        response = httpx.request(method, live_asgi.mcp_url, headers=headers, timeout=5)
        assert (response.status_code, response.headers["allow"]) == (405, "POST")
        assert response.json()["error"] == "method_not_allowed"


@pytest.mark.parametrize("version", ["1999-01-01", "2026-07-28"])
def test_an_unknown_or_bare_modern_request_is_a_json_rpc_error_not_a_500(
    live_asgi: LiveAsgi, box_office: str, version: str
) -> None:
    # No `_meta` envelope at all: the 2026-07-28 wire requires one.
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/list"}
    response = rpc(live_asgi.mcp_url, body, box_office, **{"mcp-protocol-version": version})
    assert 400 <= response.status_code < 500
    assert response.json()["id"] == 7 and response.json()["error"]["code"] < 0
