"""Finding an agent's grant for a tool, with what a proposal needs to be judged.

`find_grant()` returns the grant with its tool and base tier, annotated with the
circuit breaker's state (`breaker_open`, `breaker_failures`) and, on PostgreSQL,
the current risk tiers (`tier_specs`): one statement on the hot path of every
proposal.
"""

from __future__ import annotations

import functools
import json
from datetime import timedelta

from django.db import connection
from django.db.models import Exists, OuterRef, Subquery

from agents.models import Agent, CircuitBreaker, Grant, column_list, instance_from_row
from toolcatalog.models import RiskTier, Tool
from toolcatalog.policy import TierSpec


def find_grant(agent: Agent, tool_name: str) -> Grant | None:
    """Return the agent's grant for the enabled tool `tool_name`, annotated; None if there is none."""
    return _grant_row(agent, tool_name) if connection.vendor == "postgresql" else _grant_orm(agent, tool_name)


def _grant_orm(agent: Agent, tool_name: str) -> Grant | None:
    breakers = CircuitBreaker.objects.filter(agent=OuterRef("agent"), tool=OuterRef("tool"))
    return (
        Grant.objects.select_related("tool__base_tier")
        .annotate(
            breaker_open=Exists(breakers.filter(opened_at__isnull=False)),
            breaker_failures=Subquery(breakers.values("consecutive_failures")[:1]),
        )
        .filter(agent=agent, tool__name=tool_name, tool__enabled=True)
        .first()
    )


@functools.cache
def _grant_sql() -> str:
    """Return the one statement that reads the grant, its tool, the tool's base tier, its breaker and all tiers.

    The ORM query it replaces (`_grant_orm`, still used on SQLite) cost ~2 ms of
    Python to compile per proposal, and the tiers a second round trip.
    """

    breaker = "FROM agents_circuitbreaker b WHERE b.agent_id = g.agent_id AND b.tool_id = g.tool_id"
    # Column names come from the models' metadata; the values are bound as parameters.
    return f"""
SELECT {column_list(Grant, "g")}, {column_list(Tool, "t")}, {column_list(RiskTier, "bt")},
       EXISTS(SELECT 1 {breaker} AND b.opened_at IS NOT NULL),
       (SELECT b.consecutive_failures {breaker} LIMIT 1),
       (SELECT json_agg(json_build_array(r.level, r.name, r.requires_approval, r.approvals_required,
                                         extract(epoch FROM r.approval_window)))::text
        FROM toolcatalog_risktier r)
FROM agents_grant g
JOIN toolcatalog_tool t ON t.id = g.tool_id
JOIN toolcatalog_risktier bt ON bt.id = t.base_tier_id
WHERE g.agent_id = %s AND t.name = %s AND t.enabled
LIMIT 1
"""  # noqa: S608


def _grant_row(agent: Agent, tool_name: str) -> Grant | None:
    with connection.cursor() as cursor:
        cursor.execute(_grant_sql(), [agent.pk, tool_name])
        row = cursor.fetchone()
    if row is None:
        return None
    sizes = [len(model._meta.concrete_fields) for model in (Grant, Tool, RiskTier)]
    grant = instance_from_row(Grant, row[: sizes[0]])
    tool = instance_from_row(Tool, row[sizes[0] : sizes[0] + sizes[1]])
    tool.base_tier = instance_from_row(RiskTier, row[sizes[0] + sizes[1] : sum(sizes)])
    grant.tool = tool
    grant.agent = agent
    grant.breaker_open, grant.breaker_failures, tiers = row[sum(sizes) :]
    grant.tier_specs = {
        level: TierSpec(level, name, requires, required, timedelta(seconds=float(window)))
        for level, name, requires, required, window in json.loads(tiers or "[]")
    }
    return grant
