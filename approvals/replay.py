"""Where policy what-if reads stored calls from: one streamed query, plain tuples, no model instances."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from agents.models import Agent, Grant
from approvals.models import ToolCall
from toolcatalog.whatif import CallRow

CHUNK_SIZE = 2000


def stored_calls(tool_id: int, since: datetime) -> Iterator[CallRow]:
    """Yield the tool's calls created since `since`, oldest first, with each agent's grant as it is today.

    Rows stream from a server-side cursor in chunks, so 100,000 calls never sit
    in memory as model instances; agent names and grants are two small lookups.
    """
    grants = dict(Grant.objects.filter(tool_id=tool_id).values_list("agent_id", "max_tier"))
    names: dict[int, str] = {}
    rows = (
        ToolCall.objects.filter(tool_id=tool_id, created_at__gte=since)
        .order_by("created_at")
        .values_list(
            "id", "created_at", "agent_id", "arguments", "arguments_hash", "status", "risk_tier", "approvals_required"
        )
    )
    for pk, created_at, agent_id, arguments, args_hash, status, tier, approvals in rows.iterator(CHUNK_SIZE):
        if agent_id not in names:
            names[agent_id] = Agent.objects.filter(pk=agent_id).values_list("name", flat=True).first() or "?"
        yield CallRow(
            pk, created_at, names[agent_id], arguments, args_hash, status, tier, approvals, grants.get(agent_id)
        )
