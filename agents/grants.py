"""Finding an agent's grant for a tool, with what a proposal needs to be judged.

`find_grant()` returns the grant with its tool and base tier, annotated with the
circuit breaker's state (`breaker_open`, `breaker_failures`) and, on PostgreSQL,
the current risk tiers (`tier_specs`): one statement on the hot path of every
proposal.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from django.db import connection
from django.db.models import Exists, OuterRef, Subquery

from agents.models import Agent, CircuitBreaker, Grant, column_list, hash_token, instance_from_row
from audit.typealiases import SQLValue
from toolcatalog.models import RiskTier, Tool
from toolcatalog.policy import TierSpec


def find_grant(agent: Agent, tool_name: str) -> Grant | None:
    """Return the agent's grant for the enabled tool `tool_name`, annotated; None if there is none."""
    return _grant_row(agent, tool_name) if connection.vendor == "postgresql" else _grant_orm(agent, tool_name)


def _grant_orm(agent: Agent, tool_name: str) -> Grant | None:
    breakers = CircuitBreaker.objects.filter(agent=OuterRef("agent"), tool=OuterRef("tool"))
    # django-stubs takes these annotations for redefinitions of the attributes Grant declares for them; Django
    # refuses only an annotation named like a field.
    return (
        Grant.objects.select_related("tool__base_tier")  # type: ignore[no-redef]
        .annotate(
            breaker_open=Exists(breakers.filter(opened_at__isnull=False)),
            breaker_failures=Subquery(breakers.values("consecutive_failures")[:1]),
        )
        .filter(agent=agent, tool__name=tool_name, tool__enabled=True)
        .first()
    )


@functools.cache
def _grant_columns() -> str:
    """Return what a proposal needs of a grant: it, its tool, the tool's base tier, its breaker, all tiers."""
    breaker = "FROM agents_circuitbreaker b WHERE b.agent_id = g.agent_id AND b.tool_id = g.tool_id"
    # Column names come from the models' metadata; the values are bound as parameters.
    return f"""{column_list(Grant, "g")}, {column_list(Tool, "t")}, {column_list(RiskTier, "bt")},
       EXISTS(SELECT 1 {breaker} AND b.opened_at IS NOT NULL),
       (SELECT b.consecutive_failures {breaker} LIMIT 1),
       (SELECT json_agg(json_build_array(r.level, r.name, r.requires_approval, r.approvals_required,
                                         extract(epoch FROM r.approval_window)))::text
        FROM toolcatalog_risktier r)"""  # noqa: S608


@functools.cache
def _grant_sql() -> str:
    """Return the one statement that reads the grant, its tool, the tool's base tier, its breaker and all tiers.

    Every proposal reads it: written once, it is not compiled again per proposal as
    the ORM query (`_grant_orm`, still used on SQLite) is, and the tiers come in
    the same round trip instead of a second.
    """
    return f"""
SELECT {_grant_columns()}
FROM agents_grant g
JOIN toolcatalog_tool t ON t.id = g.tool_id
JOIN toolcatalog_risktier bt ON bt.id = t.base_tier_id
WHERE g.agent_id = %s AND t.name = %s AND t.enabled
LIMIT 1
"""  # noqa: S608


@functools.cache
def _agent_and_grant_sql() -> str:
    """Return `_grant_sql` joined to the agent found by its token hash: one statement for both reads."""
    # The grant's side of the join is inner (grant, its enabled tool by that name, its
    # tier); the agent's is outer, so an agent without that grant still comes back.
    return f"""
SELECT {column_list(Agent, "a")}, {_grant_columns()}
FROM agents_agent a
LEFT JOIN (agents_grant g
           JOIN toolcatalog_tool t ON t.id = g.tool_id AND t.name = %s AND t.enabled
           JOIN toolcatalog_risktier bt ON bt.id = t.base_tier_id) ON g.agent_id = a.id
WHERE a.token_hash = %s AND a.active
LIMIT 1
"""  # noqa: S608


@dataclass(frozen=True)
class ReadGrant:
    """The grant read for `tool_name` (`grant` None: the agent has none for an enabled tool by that name)."""

    tool_name: str
    grant: Grant | None


def authenticate_with_grant(token: str, tool_name: str) -> tuple[Agent | None, ReadGrant]:
    """Return the active agent holding `token` and its grant for the enabled tool `tool_name`.

    A proposal needs both, one after the other: on PostgreSQL they are one statement
    (one round trip fewer on every proposal); elsewhere two reads.
    The agent is touched as `Agent.authenticate` does.
    """
    if connection.vendor != "postgresql":
        agent = Agent.authenticate(token)
        return agent, ReadGrant(tool_name, None if agent is None else find_grant(agent, tool_name))
    row = None
    if token:
        with connection.cursor() as cursor:
            cursor.execute(_agent_and_grant_sql(), [tool_name, hash_token(token)])
            row = cursor.fetchone()
    if row is None:
        return None, ReadGrant(tool_name, None)
    size = len(Agent._meta.concrete_fields)
    agent = instance_from_row(Agent, row[:size])
    agent.touch()
    grant_row = row[size:]
    return agent, ReadGrant(tool_name, None if grant_row[0] is None else _grant_from_row(agent, grant_row))


def _grant_row(agent: Agent, tool_name: str) -> Grant | None:
    with connection.cursor() as cursor:
        cursor.execute(_grant_sql(), [agent.pk, tool_name])
        row = cursor.fetchone()
    return None if row is None else _grant_from_row(agent, row)


def _grant_from_row(agent: Agent, row: Sequence[SQLValue]) -> Grant:
    """Build the annotated grant from a row of `_grant_columns`."""
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
