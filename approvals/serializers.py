"""The call body agents receive, REST and MCP alike."""

from __future__ import annotations

from datetime import datetime

from approvals.models import ToolCall
from audit.typealiases import JSONObject
from toolcatalog.models import Tool
from toolcatalog.sensitive import mask_arguments


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def call_body(call: ToolCall) -> JSONObject:
    """Return the API representation of a call."""
    return {
        "id": str(call.pk),
        "tool": call.tool.name,
        "status": call.status,
        "risk_tier": call.risk_tier,
        "risk_reasons": call.risk_reasons,
        "approvals_required": call.approvals_required,
        "idempotency_key": call.idempotency_key,
        "arguments": mask_arguments(call.tool, call.arguments),
        "conversation_id": call.conversation_id or None,
        "step": call.step,
        "call_index": call.call_index,
        "result": call.result,
        "error": call.error,
        "preview": call.preview,
        "created_at": _iso(call.created_at),
        "decided_at": _iso(call.decided_at),
        "expires_at": _iso(call.expires_at),
        "finished_at": _iso(call.finished_at),
    }


def tool_body(tool: Tool) -> JSONObject:
    """Return a tool in the MCP `tools/list` shape."""
    body: JSONObject = {
        "name": tool.name,
        "title": tool.title or tool.name,
        "description": tool.description,
        "inputSchema": tool.input_schema,
        "annotations": tool.annotations,
    }
    if tool.output_schema:
        body["outputSchema"] = tool.output_schema
    return body
