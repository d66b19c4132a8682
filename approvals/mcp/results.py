"""What a model reads back from `tools/call`: the REST bodies, wrapped as MCP tool results.

The structured content is byte-for-byte the REST body (a call body, or an error
body), so a program can treat both APIs alike; the first text block says in plain
words what happened and what to do next, because that is what a model reads.
"""

from __future__ import annotations

import json

import mcp.types as types

from approvals.errors import ApiError
from approvals.states import Status
from audit.typealiases import JSONObject, JSONValue

META_PREFIX = "gatehouse/"
STATUS_TOOL = "get_call_status"

# Terminal states in which the tool's effect did not (or may not) happen: the model
# must see these as failures it has to handle, not as results.
FAILED_STATUSES = frozenset(
    {Status.REFUSED, Status.REJECTED, Status.EXPIRED, Status.FAILED, Status.NEEDS_RECONCILIATION}
)

_NULLABLE_STRING = {"type": ["string", "null"]}


def call_envelope_schema(result_schema: JSONObject | None = None) -> JSONObject:
    """Return the JSON Schema of a call body whose `result` follows `result_schema` once it succeeded.

    Every tools/call answer carries the call body (a pending call has no tool output
    yet), so a tool's own outputSchema is advertised inside this envelope.
    """
    result = {"anyOf": [result_schema, {"type": "null"}]} if result_schema else {}
    return {
        "type": "object",
        "properties": {
            "id": {"type": "string", "description": "The call's id; pass it to get_call_status."},
            "tool": {"type": "string"},
            "status": {"type": "string", "enum": [choice.value for choice in Status]},
            "risk_tier": {"type": ["integer", "null"]},
            "idempotency_key": _NULLABLE_STRING,
            "arguments": {"type": "object"},
            "result": {**result, "description": "The tool's output, once status is 'succeeded'."},
            "error": {"type": ["object", "null"]},
            "preview": {"type": ["object", "null"]},
            "expires_at": _NULLABLE_STRING,
        },
        "required": ["id", "tool", "status"],
    }


def error_result(error: ApiError) -> types.CallToolResult:
    """Return a refusal as a tool result the model can correct itself from (REST's error body)."""
    body = error.body()
    return types.CallToolResult(
        content=[types.TextContent(text=_dumps(body))],
        structured_content=body,
        is_error=True,
        _meta={META_PREFIX + "error": error.code},
    )


def call_result(body: JSONObject, *, replayed: bool = False) -> types.CallToolResult:
    """Return a call body as a tool result: a plain-words summary, then the body as JSON."""
    summary = explain(body)
    if replayed:
        summary = "Replayed: this idempotency key already belongs to this exact call, so nothing ran again. " + summary
    return types.CallToolResult(
        content=[types.TextContent(text=summary), types.TextContent(text=_dumps(body))],
        structured_content=body,
        is_error=body["status"] in FAILED_STATUSES,
        _meta={
            META_PREFIX + "call_id": body["id"],
            META_PREFIX + "status": body["status"],
            META_PREFIX + "replayed": replayed,
        },
    )


def explain(body: JSONObject) -> str:
    """Return one paragraph telling a model what state the call is in and what to do next."""
    tool, call_id, status = body["tool"], body["id"], body["status"]
    how_to_follow = (
        f'To get the outcome, call {STATUS_TOOL} with {{"call_id": "{call_id}", "wait_seconds": 20}}, or repeat '
        "this exact call with the same idempotency key (you get this same call back; it never runs twice). "
        "Do not propose it again under a new key."
    )
    error = body.get("error") or {}
    if status == Status.SUCCEEDED:
        return f"{tool} succeeded (call {call_id}). Result: {_dumps(body.get('result'))}"
    if status == Status.PENDING_APPROVAL:
        reasons = "; ".join(
            str(reason.get("description") or reason.get("rule")) for reason in body.get("risk_reasons") or []
        )
        why = f" because of: {reasons}" if reasons else ""
        return (
            f"{tool} has NOT run: call {call_id} is waiting for a human reviewer "
            f"(risk tier {body.get('risk_tier')}{why}; the approval window ends {body.get('expires_at')}). "
            "A reviewer will approve or reject it, which can take minutes or hours. " + how_to_follow
        )
    if status in (Status.APPROVED, Status.EXECUTING):
        return f"{tool} was approved and is running (call {call_id}); the outcome is not known yet. " + how_to_follow
    if status == Status.REJECTED:
        return (
            f"A reviewer rejected {tool} (call {call_id}); it did not run. Reason: {error.get('reason', '')}. "
            "Do not retry the same call: change the plan or tell the user."
        )
    if status == Status.EXPIRED:
        return f"{tool} did not run: no reviewer decided on call {call_id} within its approval window."
    if status == Status.NEEDS_RECONCILIATION:
        return (
            f"{tool} ran but its effect could not be confirmed (call {call_id}); a person will reconcile it. "
            "Do not retry it."
        )
    return f"{tool} call {call_id} ended with status {status}: {error.get('message', '')}"


def _dumps(value: JSONValue) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
