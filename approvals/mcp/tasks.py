"""Held calls as MCP tasks: the Tasks extension (`io.modelcontextprotocol/tasks`) of the 2026-07-28 protocol.

A client that declares the extension in a request's capabilities gets a call that
has not finished — waiting for a reviewer, or approved and not yet run — back from
`tools/call` as a task (`resultType: "task"`) instead of a `pending_approval` tool
result. The task is the call itself: `taskId` is the call's id, so any web process
answers for it and it lives as long as the call. `tasks/get` reads it, `tasks/cancel`
withdraws it (`lifecycle.withdraw_by_agent`: a call a worker already claimed runs to
its end). Both are answered only for the agent that proposed the call; any other id
is "not found", as `get_call_status` answers. Clients that do not declare the
extension keep the tool result and `get_call_status`.

Task statuses, in the extension's terms:

- pending_approval, approved, executing → `working`, its `statusMessage` saying which
  (`input_required` is for requests the *client* must answer; a reviewer is not the client);
- succeeded → `completed` with the tool result a plain `tools/call` gives;
- rejected, expired, failed, needs_reconciliation, refused → `completed` with that same
  tool result (`isError: true`, the reason in its body and text): the extension keeps
  `failed` for JSON-RPC errors, and these are tool outcomes;
- withdrawn (by `tasks/cancel`, or the agent's deactivation) → `cancelled`, with the reason.

`ttlMs` counts from `createdAt` (the call's creation): while the call waits for a
reviewer it ends with the approval window (after it, the call expires); a decided call
is kept for good (`null`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime

import mcp.types as types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.requests import Request

from agents.models import Agent
from approvals import lifecycle
from approvals.errors import ApiError
from approvals.mcp.identity import orm_work, request_agent
from approvals.mcp.results import META_PREFIX, STATUS_TOOL, call_result
from approvals.proposals import get_agent_call
from approvals.serializers import call_body
from approvals.states import AGENT_DEACTIVATED, Status
from audit.typealiases import JSONObject

EXTENSION = "io.modelcontextprotocol/tasks"
UNFINISHED = frozenset({Status.PENDING_APPROVAL, Status.APPROVED, Status.EXECUTING})
WITHDRAWN = frozenset({AGENT_DEACTIVATED, lifecycle.WITHDRAWN_BY_AGENT})
# A reviewer takes minutes; an approved call runs in seconds.
POLL_WAITING_MS = 5000
POLL_RUNNING_MS = 1000

Context = ServerRequestContext[JSONObject, Request]
CallTool = Callable[[Context, types.CallToolRequestParams], Awaitable[types.CallToolResult]]
TaskOrCallTool = Callable[[Context, types.CallToolRequestParams], Awaitable[types.CallToolResult | JSONObject]]


def declared(ctx: Context) -> bool:
    """Return whether this request's client declared the Tasks extension (on a protocol that has it)."""
    capabilities = ctx.session.client_capabilities
    extensions = (capabilities.extensions if capabilities is not None else None) or {}
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS and EXTENSION in extensions


def task(body: JSONObject) -> JSONObject:
    """Return the task (the extension's DetailedTask) that a call body is."""
    status = body["status"]
    updated = body.get("finished_at") or body.get("decided_at") or body["created_at"]
    shape: JSONObject = {
        "taskId": body["id"],
        "createdAt": body["created_at"],
        "lastUpdatedAt": updated,
        "ttlMs": _ttl_ms(body),
    }
    if status in UNFINISHED:
        waiting = status == Status.PENDING_APPROVAL
        poll = POLL_WAITING_MS if waiting else POLL_RUNNING_MS
        return {**shape, "status": "working", "statusMessage": _working(body), "pollIntervalMs": poll}
    error = body.get("error") or {}
    if status == Status.REFUSED and error.get("error") in WITHDRAWN:
        return {**shape, "status": "cancelled", "statusMessage": error.get("message", "The call was withdrawn.")}
    result = call_result(body).model_dump(by_alias=True, mode="json", exclude_none=True)
    return {**shape, "status": "completed", "statusMessage": f"{body['tool']}: {status}", "result": result}


def _ttl_ms(body: JSONObject) -> int | None:
    if body["status"] != Status.PENDING_APPROVAL or not body.get("expires_at"):
        return None
    window = datetime.fromisoformat(body["expires_at"]) - datetime.fromisoformat(body["created_at"])
    return max(0, int(window.total_seconds() * 1000))


def _working(body: JSONObject) -> str:
    if body["status"] == Status.PENDING_APPROVAL:
        return (
            f"{body['tool']} has NOT run: it is waiting for a human reviewer (risk tier {body.get('risk_tier')}; "
            f"the approval window ends {body.get('expires_at')})."
        )
    return f"{body['tool']} was approved and is running; the outcome is not known yet."


def get_task(agent: Agent, task_id: str) -> JSONObject:
    """Return this agent's call `task_id` as a task (another agent's, or no call: `not_found`)."""
    return task(call_body(get_agent_call(agent, task_id)))


def cancel_task(agent: Agent, task_id: str) -> bool:
    """Withdraw this agent's call `task_id` if nothing has started it; return whether it was withdrawn."""
    return lifecycle.withdraw_by_agent(get_agent_call(agent, task_id))


def _modern_only(ctx: Context) -> None:
    # The 2025-11-25 protocol has tasks/* of its own, with other shapes: those are not served.
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        raise MCPError(types.METHOD_NOT_FOUND, "Method not found", data=ctx.method)


def _not_found(error: ApiError) -> MCPError:
    return MCPError(types.INVALID_PARAMS, f"Failed to retrieve task: {error.message}")


async def serve_get(ctx: Context, params: types.GetTaskRequestParams) -> JSONObject:
    """Serve tasks/get: the call's current state as a task."""
    _modern_only(ctx)
    try:
        return await orm_work(get_task)(request_agent(ctx), params.task_id)
    except ApiError as error:
        raise _not_found(error) from None


async def serve_cancel(ctx: Context, params: types.CancelTaskRequestParams) -> JSONObject:
    """Serve tasks/cancel: acknowledge, having withdrawn the call if nothing had started it."""
    _modern_only(ctx)
    try:
        withdrawn = await orm_work(cancel_task)(request_agent(ctx), params.task_id)
    except ApiError as error:
        raise _not_found(error) from None
    return {"_meta": {META_PREFIX + "withdrawn": withdrawn}}


def held_as_tasks(call_tool: CallTool) -> TaskOrCallTool:
    """Wrap a tools/call handler: an unfinished call comes back as a task to a client that declared tasks.

    Only a proposal's answer: `get_call_status` reads a call the client already holds, so it stays a tool result.
    """

    async def handler(ctx: Context, params: types.CallToolRequestParams) -> types.CallToolResult | JSONObject:
        result = await call_tool(ctx, params)
        if params.name == STATUS_TOOL or result.is_error or not declared(ctx):
            return result
        body = result.structured_content or {}
        if META_PREFIX + "call_id" in (result.meta or {}) and body.get("status") in UNFINISHED:
            return {"resultType": "task", **task(body)}
        return result

    return handler


def install(server: Server[JSONObject], call_tool: CallTool) -> None:
    """Serve tools/call through `call_tool` with held calls as tasks, serve tasks/*, and advertise the extension."""
    server.add_request_handler("tools/call", types.CallToolRequestParams, held_as_tasks(call_tool))
    server.add_request_handler("tasks/get", types.GetTaskRequestParams, serve_get)
    server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, serve_cancel)
    server.extensions[EXTENSION] = {}
