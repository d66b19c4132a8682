"""Policy what-if: replay stored calls against a policy and say what would change.

The replay runs the very same pure `evaluate()` the pipeline runs, over plain rows
streamed from the calls table: one query, plain tuples, no model instances.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple
from uuid import UUID

from agents.models import Agent, Grant
from approvals.limits import ReplayWindows
from approvals.models import ToolCall
from audit.typealiases import JSONValue
from toolcatalog.policy import Outcome, TierGrant, ToolPolicy, Verdict, evaluate

REFUSED, NEEDS_APPROVAL, RUNS = "refused", "needs approval", "runs without approval"
NO_TIER = "none"  # refused before it was classified (invalid arguments, no grant)
CHUNK_SIZE = 2000


class CallRow(NamedTuple):
    """One stored call, as much of it as a replay needs."""

    call_id: UUID
    created_at: datetime
    agent_name: str
    arguments: JSONValue
    arguments_hash: str
    status: str
    risk_tier: int | None
    approvals_required: int
    max_tier: int | None  # the agent's grant on the tool today; None: no grant any more


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


@dataclass(frozen=True)
class ChangedCall:
    """A call whose tier or outcome would be different under the replayed policy."""

    call_id: UUID
    created_at: datetime
    agent_name: str
    tier_before: int | str
    tier_after: int | str
    outcome_before: str
    outcome_after: str
    rules_after: list[str]
    error_after: str | None


@dataclass
class WhatIfReport:
    """Counts per tier and outcome before → after, and the calls that would change."""

    total: int = 0
    tiers_before: Counter[int | str] = field(default_factory=Counter)
    tiers_after: Counter[int | str] = field(default_factory=Counter)
    outcomes_before: Counter[str] = field(default_factory=Counter)
    outcomes_after: Counter[str] = field(default_factory=Counter)
    changed_count: int = 0
    changed: list[ChangedCall] = field(default_factory=list)
    seconds: float = 0.0

    def tier_rows(self) -> list[tuple[int | str, int, int]]:
        """Return (tier, calls before, calls after) for every tier either side has."""
        keys = set(self.tiers_before) | set(self.tiers_after)
        ordered = sorted((k for k in keys if k != NO_TIER), key=int) + ([NO_TIER] if NO_TIER in keys else [])
        return [(key, self.tiers_before[key], self.tiers_after[key]) for key in ordered]

    def outcome_rows(self) -> list[tuple[str, int, int]]:
        """Return (outcome, calls before, calls after) in a fixed order."""
        return [
            (name, self.outcomes_before[name], self.outcomes_after[name]) for name in (RUNS, NEEDS_APPROVAL, REFUSED)
        ]


def recorded_outcome(row: CallRow) -> str:
    """Return what the pipeline decided for a stored call: refused, held for approval, or let run."""
    if row.status == "refused":
        return REFUSED
    return NEEDS_APPROVAL if row.approvals_required else RUNS


def verdict_outcome(verdict: Verdict) -> str:
    """Return what a verdict would decide, in the same words as `recorded_outcome`."""
    if verdict.outcome == Outcome.REFUSED:
        return REFUSED
    return NEEDS_APPROVAL if verdict.outcome == Outcome.PENDING_APPROVAL else RUNS


def replay(policy: ToolPolicy, rows: Iterable[CallRow], *, listed: int = 200) -> WhatIfReport:
    """Judge every row again under `policy`; return the counts and the first `listed` changed calls.

    `evaluate()` is pure, so two calls with the same arguments and the same grant
    get the same verdict: it is computed once per (arguments, grant). Under cumulative
    limits each call is judged with its windows' totals (limits.ReplayWindows), one by one.
    """
    started = time.perf_counter()
    report = WhatIfReport()
    verdicts: dict[tuple[str, int | None], Verdict] = {}
    grants = {level: TierGrant(level) for level in range(4)}
    windows = ReplayWindows(policy) if policy.cumulative else None
    for row in rows:
        key = (row.arguments_hash, row.max_tier)
        grant = grants.get(row.max_tier) if row.max_tier is not None else None
        if windows is not None:
            verdict = evaluate(
                policy, grant, row.arguments, windows.usage(row.agent_name, row.arguments, row.created_at)
            )
            windows.add(row.agent_name, row.arguments, row.created_at, row.status)
        else:
            verdict = verdicts.get(key) or verdicts.setdefault(key, evaluate(policy, grant, row.arguments))
        _count(report, row, verdict, listed)
    report.seconds = time.perf_counter() - started
    return report


def _count(report: WhatIfReport, row: CallRow, verdict: Verdict, listed: int) -> None:
    tier_before = row.risk_tier if row.risk_tier is not None else NO_TIER
    tier_after = verdict.risk_tier if verdict.risk_tier is not None else NO_TIER
    outcome_before, outcome_after = recorded_outcome(row), verdict_outcome(verdict)
    report.total += 1
    report.tiers_before[tier_before] += 1
    report.tiers_after[tier_after] += 1
    report.outcomes_before[outcome_before] += 1
    report.outcomes_after[outcome_after] += 1
    if tier_before == tier_after and outcome_before == outcome_after:
        return
    report.changed_count += 1
    if len(report.changed) < listed:
        report.changed.append(
            ChangedCall(
                call_id=row.call_id,
                created_at=row.created_at,
                agent_name=row.agent_name,
                tier_before=tier_before,
                tier_after=tier_after,
                outcome_before=outcome_before,
                outcome_after=outcome_after,
                rules_after=[reason["rule"] for reason in verdict.risk_reasons],
                error_after=verdict.error_code,
            )
        )
