"""Everything between "approved" and "the effect happened", seen from the web process.

Enqueueing happens only after the approving transaction commits; a broker that is
down at that moment costs nothing, because the sweeper re-enqueues approved calls
nobody claimed.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

from agents.models import Agent
from approvals.models import ToolCall
from toolcatalog.executors import ExecutionContext, ExecutorError, executor_for
from toolcatalog.models import Tool

log = logging.getLogger(__name__)


def enqueue(call_id: str) -> bool:
    """Send the execution task; return False (and log) if the broker is unreachable."""
    from approvals.tasks import execute_call

    try:
        execute_call.apply_async(kwargs={"call_id": call_id}, retry=False)
    except Exception:  # noqa: BLE001 — any broker failure; the sweeper re-enqueues
        log.warning("broker unreachable; call %s stays approved for the sweeper", call_id)
        return False
    return True


def enqueue_on_commit(call: ToolCall) -> None:
    """Enqueue the call's execution once the current transaction commits."""
    call_id = str(call.pk)
    transaction.on_commit(lambda: enqueue(call_id))


def preview_context(tool: Tool, agent: Agent, arguments: dict[str, Any], call_id: str = "") -> ExecutionContext:
    """Return the context of a dry run: it carries no credential able to change anything."""
    resource = arguments.get(tool.resource_argument) if tool.resource_argument else None
    return ExecutionContext(
        tool_name=tool.name,
        arguments=arguments,
        resource=str(resource) if resource is not None else None,
        call_id=call_id,
        agent_name=agent.name,
        idempotency_key="",
        credential="",
    )


def preview_arguments(tool: Tool, agent: Agent, arguments: dict[str, Any]) -> dict[str, Any]:
    """Predict the effect of calling `tool` with `arguments`: `{summary, before, after}`."""
    try:
        return executor_for(tool).dry_run(preview_context(tool, agent, arguments))
    except ExecutorError as exc:
        return {"summary": "No preview available.", "before": None, "after": None, "error": str(exc)}
    except Exception:  # a preview is advice for the reviewer; its failure must not fail the proposal
        log.exception("dry run of %s failed", tool.name)
        return {"summary": "No preview available.", "before": None, "after": None, "error": "preview failed"}


def attach_preview(call: ToolCall) -> None:
    """Compute and store the dry-run preview a reviewer will read (outside any transaction)."""
    call.preview = preview_arguments(call.tool, call.agent, call.arguments)
    ToolCall.objects.filter(pk=call.pk).update(preview=call.preview)
