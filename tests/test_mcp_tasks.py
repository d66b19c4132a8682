"""Held calls as MCP tasks (the 2026-07-28 Tasks extension), against the live ASGI server.

The client is the official SDK's `mcp.Client` declaring the extension the way the SDK
lets a client extension do it: `ClientExtension` with a `ResultClaim` on
`resultType: "task"`; `tasks/get` and `tasks/cancel` go out through its session, with
the `Mcp-Name` header the extension asks for.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any, Literal, TypeVar

import httpx2
import mcp.types as types
import pytest
from django.contrib.auth.models import Permission, User
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import TypeAdapter

from approvals import lifecycle
from approvals.models import Status, ToolCall
from audit.models import Event
from demo.models import Refund
from tests.browser import Console
from tests.conftest import AgentFactory
from tests.mcp_server import LiveAsgi

T = TypeVar("T")
TASKS = "io.modelcontextprotocol/tasks"
REFUND = {"pedido_id": "PED-00000005", "valor_centavos": 35000, "motivo": "atraso_entrega"}  # tier 2: one reviewer
TERMINAL = {"completed", "failed", "cancelled"}
RAW = TypeAdapter(dict[str, Any])


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


class TaskHandle(types.Result):
    """What a server answers instead of a tool result when it made the call a task (`CreateTaskResult`)."""

    result_type: Literal["task"]
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None
    poll_interval_ms: int | None = None


class GetTask(types.Request[types.GetTaskRequestParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"


class CancelTask(types.Request[types.CancelTaskRequestParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


async def get_task(client: Client, task_id: str) -> dict[str, Any]:
    request = GetTask(params=types.GetTaskRequestParams(task_id=task_id))
    return await client.session.send_request(request, RAW)


async def cancel_task(client: Client, task_id: str) -> dict[str, Any]:
    request = CancelTask(params=types.CancelTaskRequestParams(task_id=task_id))
    return await client.session.send_request(request, RAW)


async def until_done(client: Client, task_id: str, timeout: float = 60) -> list[dict[str, Any]]:
    """Poll tasks/get until the task ends; return every answer."""
    answers: list[dict[str, Any]] = []
    with anyio_fail_after(timeout):
        while not answers or answers[-1]["status"] not in TERMINAL:
            if answers:
                await asyncio.sleep(0.2)
            answers.append(await get_task(client, task_id))
    return answers


async def follow(handle: TaskHandle, ctx: ClaimContext) -> types.CallToolResult:
    """Resolve a task into the tool result it ends with (what `Client.call_tool` returns to its caller)."""
    client = ctx.session
    while True:
        request = GetTask(params=types.GetTaskRequestParams(task_id=handle.task_id))
        task = await client.send_request(request, RAW)
        if task["status"] == "completed":
            return types.CallToolResult.model_validate(task["result"])
        if task["status"] in TERMINAL:
            return types.CallToolResult(content=[types.TextContent(text=task.get("statusMessage", ""))], is_error=True)
        await asyncio.sleep(0.2)


class Tasks(ClientExtension):
    identifier = TASKS

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return (ResultClaim(result_type="task", model=TaskHandle, resolve=follow),)


@asynccontextmanager
async def connect(url: str, token: str, *, tasks: bool = True) -> AsyncIterator[Client]:
    """An `mcp.Client` (auto mode: 2026-07-28), declaring the Tasks extension unless told not to."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=90) as http,
        Client(streamable_http_client(url, http_client=http), extensions=[Tasks()] if tasks else None) as client,
    ):
        yield client


async def propose(client: Client, key: str, arguments: dict[str, Any] = REFUND) -> Any:
    """Propose the refund with `key`; return what came back (a TaskHandle, or a tool result)."""
    meta = {"gatehouse/idempotency_key": key}
    return await client.session.call_tool("emitir_estorno", arguments, meta=meta, allow_claimed=True)


def anyio_fail_after(seconds: float) -> Any:
    import anyio

    return anyio.fail_after(seconds)


def reviewer() -> User:
    user = User.objects.create_user("rita", password="x")
    user.user_permissions.add(Permission.objects.get(codename="review_toolcall"))
    return User.objects.get(pk=user.pk)  # fresh: permissions are cached per instance


@pytest.mark.worker
def test_a_held_call_is_a_task_that_tasks_get_follows_until_it_completes_with_the_tool_result(
    live_asgi: LiveAsgi,
    celery_worker: Any,
    demo_services: str,
    console: Callable[[str], Console],
    make_agent: AgentFactory,
) -> None:
    _, token = make_agent("support-agent", {"emitir_estorno": 3, "get_order_status": 0}, owner="admin")

    async def held() -> tuple[Any, dict[str, Any], Any]:
        async with connect(live_asgi.mcp_url, token) as client:
            handle = await propose(client, "k-task")
            polled = await get_task(client, handle.task_id)
            quick = await client.session.call_tool(
                "get_order_status",
                {"order_id": "PED-00000005"},
                meta={"gatehouse/wait_seconds": 60},  # it runs without a reviewer: wait for its result
                allow_claimed=True,
            )
        return handle, polled, quick

    handle, polled, quick = run(held())
    call = ToolCall.objects.get(tool__name="emitir_estorno")
    assert isinstance(handle, TaskHandle)
    assert (handle.task_id, handle.status, call.status) == (str(call.pk), "working", Status.PENDING_APPROVAL)
    assert "waiting for a human reviewer" in (handle.status_message or "")
    assert handle.ttl_ms == (call.expires_at - call.created_at) // timedelta(milliseconds=1)  # the approval window
    assert handle.poll_interval_ms == 5000
    assert (polled["resultType"], polled["taskId"], polled["status"]) == ("complete", str(call.pk), "working")
    assert not Refund.objects.exists()
    # A call that finishes while the server waits is answered with its result, task or not.
    assert isinstance(quick, types.CallToolResult) and quick.structured_content["status"] == "succeeded"

    assert console("alice").approve(call).status_code == 302

    async def after_approval() -> list[dict[str, Any]]:
        async with connect(live_asgi.mcp_url, token) as client:
            return await until_done(client, handle.task_id)

    answers = run(after_approval())
    done = answers[-1]
    assert {answer["status"] for answer in answers[:-1]} <= {"working"}
    assert (done["status"], done["ttlMs"]) == ("completed", None)
    result = types.CallToolResult.model_validate(done["result"])
    body = result.structured_content
    assert (result.is_error, body["id"], body["status"]) == (False, str(call.pk), "succeeded")
    assert body["result"]["refund_id"] == Refund.objects.get().refund_id
    assert result.content[0].text.startswith("emitir_estorno succeeded")


def test_tasks_cancel_withdraws_a_held_call_and_another_agent_can_neither_read_nor_cancel_it(
    live_asgi: LiveAsgi, make_agent: AgentFactory
) -> None:
    _, token = make_agent("support-agent", {"emitir_estorno": 3})
    _, intruder = make_agent("intruder", {"get_order_status": 0})

    async def intrusion() -> tuple[str, list[MCPError]]:
        async with connect(live_asgi.mcp_url, token) as client:
            task_id = (await propose(client, "k-cancel")).task_id
        refused = []
        async with connect(live_asgi.mcp_url, intruder) as other:
            for attempt in (get_task, cancel_task):
                with pytest.raises(MCPError) as error:
                    await attempt(other, task_id)
                refused.append(error.value)
        return task_id, refused

    task_id, refused = run(intrusion())
    assert [error.code for error in refused] == [types.INVALID_PARAMS, types.INVALID_PARAMS]
    assert all("No call with that id belongs to this agent" in str(error) for error in refused)
    assert ToolCall.objects.get(pk=task_id).status == Status.PENDING_APPROVAL

    async def cancel() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        async with connect(live_asgi.mcp_url, token) as client:
            return (
                await cancel_task(client, task_id),
                await get_task(client, task_id),
                await cancel_task(client, task_id),
            )

    ack, cancelled, again = run(cancel())
    assert (ack["resultType"], ack["_meta"]["gatehouse/withdrawn"]) == ("complete", True)
    assert cancelled["status"] == "cancelled"
    assert cancelled["statusMessage"] == "The agent withdrew this call before it ran: it will not run."
    assert again["_meta"]["gatehouse/withdrawn"] is False  # already withdrawn: nothing more happened
    call = ToolCall.objects.get(pk=task_id)
    assert (call.status, call.error["error"]) == (Status.REFUSED, "withdrawn_by_agent")
    event = Event.objects.get(call_id=task_id, action="call.withdrawn")
    assert (event.actor_kind, event.actor_name) == ("agent", "support-agent")
    assert (event.data["was"], event.data["to"]) == (Status.PENDING_APPROVAL, Status.REFUSED)


def test_tasks_cancel_never_withdraws_a_call_a_worker_already_claimed(
    live_asgi: LiveAsgi, make_agent: AgentFactory, sink_broker: Any
) -> None:
    _, token = make_agent("support-agent", {"emitir_estorno": 3})

    async def held() -> str:
        async with connect(live_asgi.mcp_url, token) as client:
            return (await propose(client, "k-running")).task_id

    task_id = run(held())
    call = ToolCall.objects.get(pk=task_id)
    assert lifecycle.approve(call, reviewer())  # its execution message goes to a broker no worker reads
    assert lifecycle.claim(ToolCall.objects.get(pk=task_id), timedelta(minutes=5))

    async def cancel() -> tuple[dict[str, Any], dict[str, Any]]:
        async with connect(live_asgi.mcp_url, token) as client:
            return await cancel_task(client, task_id), await get_task(client, task_id)

    ack, running = run(cancel())
    assert ack["_meta"]["gatehouse/withdrawn"] is False
    assert (running["status"], running["pollIntervalMs"], running["ttlMs"]) == ("working", 1000, None)
    assert "approved and is running" in running["statusMessage"]
    assert ToolCall.objects.get(pk=task_id).status == Status.EXECUTING
    assert not Event.objects.filter(call_id=task_id, action="call.withdrawn").exists()


def test_a_rejected_task_completes_with_the_error_result_and_the_sdk_resolves_it_for_call_tool(
    live_asgi: LiveAsgi, make_agent: AgentFactory
) -> None:
    _, token = make_agent("support-agent", {"emitir_estorno": 3})

    def reject_when_proposed() -> None:
        call = wait_for_call()
        try:
            assert lifecycle.reject(call, reviewer(), "Order was refunded by phone already.")
        finally:
            close_connection()

    async def scenario() -> types.CallToolResult:
        async with connect(live_asgi.mcp_url, token) as client:
            rejecting = asyncio.create_task(asyncio.to_thread(reject_when_proposed))
            # The SDK sees resultType "task" and hands it to the extension's resolver, which polls tasks/get.
            result = await client.call_tool("emitir_estorno", REFUND, meta={"gatehouse/idempotency_key": "k-no"})
            await rejecting
        return result

    result = run(scenario())
    assert result.is_error is True
    assert result.structured_content["status"] == "rejected"
    assert result.structured_content["error"]["reason"] == "Order was refunded by phone already."
    assert "refunded by phone" in result.content[0].text


def test_clients_without_the_extension_keep_the_tool_result_and_get_call_status(
    live_asgi: LiveAsgi, make_agent: AgentFactory
) -> None:
    _, token = make_agent("support-agent", {"emitir_estorno": 3})

    async def scenario() -> tuple[Any, types.CallToolResult, Any, Any]:
        async with connect(live_asgi.mcp_url, token, tasks=False) as client:
            pending = await propose(client, "k-plain")
            status = await client.call_tool("get_call_status", {"call_id": pending.structured_content["id"]})
        async with connect(live_asgi.mcp_url, token) as client:
            announced = (client.server_capabilities.extensions or {}).get(TASKS)
            # The status tool reads a call the client already holds: a tool result, even for a tasks client.
            read = await client.session.call_tool(
                "get_call_status", {"call_id": pending.structured_content["id"]}, allow_claimed=True
            )
        return pending, status, read, announced

    pending, status, read, announced = run(scenario())
    assert isinstance(pending, types.CallToolResult)
    assert (pending.is_error, pending.structured_content["status"]) == (False, "pending_approval")
    assert "get_call_status" in pending.content[0].text
    assert status.structured_content == pending.structured_content
    assert isinstance(read, types.CallToolResult) and read.structured_content["status"] == "pending_approval"
    assert announced == {}


def wait_for_call() -> ToolCall:
    from tests.processes import wait_until

    return wait_until(lambda: ToolCall.objects.select_related("agent", "tool").first(), timeout=20)


def close_connection() -> None:
    from django.db import connection

    connection.close()  # a worker thread's connection must not outlive the test database
