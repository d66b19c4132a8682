"""Cumulative limits: the window's total of a tool's calls, read under a lock so concurrent proposals queue.

What a window counts: the tool's calls created in the last `window` (before the call
being judged) whose status is pending approval, approved, executing, succeeded or
needs reconciliation — a call that was let run or may still be, and a call whose
effect is unknown. Refused, rejected, expired and failed calls do not count: their
effect did not happen. A sum adds the argument's stored value (calls without it add
nothing); a count counts calls. Per agent: the proposing agent's calls; per resource:
calls with the same value of the tool's resource argument (any agent); per tool: all.

A proposal under a limit is judged and stored in one transaction that first locks
one `CumulativeLock` row per (rule, scope) — in rule order, before the budget
counters and the audit chain, as every proposal locks them — so two proposals in
the same window are judged one after the other, each on the total the other left.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import datetime

from django.db.models import FloatField, Q, Sum
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast
from django.utils import timezone

from agents.models import Agent
from approvals import sensitive
from approvals.models import ToolCall
from approvals.states import Status
from audit.canonical import canonical_hash
from audit.typealiases import JSONObject, JSONValue
from toolcatalog.models import CumulativeLock, Tool
from toolcatalog.policy import CumulativeSpec, GrantLike, ToolPolicy, Usage, Verdict, evaluate

COUNTED_STATUSES = (
    Status.PENDING_APPROVAL,
    Status.APPROVED,
    Status.EXECUTING,
    Status.SUCCEEDED,
    Status.NEEDS_RECONCILIATION,
)


class Refused(Exception):
    """A limit raised the call above what its agent's grant allows: nothing was stored."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.message)
        self.verdict = verdict


@dataclass(frozen=True)
class Scope:
    """Whose window a limit reads for one call: its lock key, its name for people, and which calls it holds."""

    key: str
    label: str
    calls: Q


def scope_of(limit: CumulativeSpec, tool_name: str, agent: Agent | None, stored: JSONObject) -> Scope | None:
    """Return the window `limit` puts a call in; None when it names no such window (no resource argument, no agent).

    `stored`: the arguments as the call is stored (a sensitive resource as its keyed hash,
    which equal values share), so the window matches stored rows.
    """
    if limit.per == "agent":
        return None if agent is None else Scope(f"agent:{agent.pk}", agent.name, Q(agent_id=agent.pk))
    if limit.per == "tool":
        return Scope("tool", tool_name, Q())
    name = limit.resource_argument
    if not name or name not in stored:
        return None
    value: JSONValue = stored[name]
    label = value if isinstance(value, str) else canonical_hash(value)[:12]
    return Scope(f"resource:{canonical_hash(value)}", f"{name} {label}", Q(**{f"arguments__{name}": value}))


def window_total(tool_id: int, limit: CumulativeSpec, scope: Scope, since: datetime) -> int | float:
    """Return the window's total before this call: the sum of the argument over counted calls, or their count."""
    calls = ToolCall.objects.filter(scope.calls, tool_id=tool_id, status__in=COUNTED_STATUSES, created_at__gt=since)
    if not limit.sum_argument:
        return calls.count()
    value = Cast(KeyTextTransform(limit.sum_argument, "arguments"), FloatField())
    total = calls.aggregate(total=Sum(value))["total"] or 0
    return int(total) if float(total).is_integer() else float(total)


def lock(rule_id: int, scope: Scope) -> None:
    """Lock the limit's row for this scope until the caller's transaction ends (creating it the first time).

    One statement: an upsert whose conflict branch updates the row, so it waits for
    and then holds the row lock either way. A row lock only: other windows go on.
    """
    CumulativeLock.objects.bulk_create(
        [CumulativeLock(rule_id=rule_id, key=scope.key)],
        update_conflicts=True,
        unique_fields=["rule", "key"],
        update_fields=["key"],
    )


def usage(
    policy: ToolPolicy,
    tool_id: int,
    agent: Agent | None,
    arguments: JSONObject,
    stored: JSONObject,
    now: datetime,
    *,
    locking: bool,
) -> dict[str, Usage]:
    """Return each applying limit's window total before this call, by rule name.

    `locking`: inside the transaction that stores the call, lock every window first
    (in rule order, so two proposals never wait on each other crosswise); otherwise
    a plain read (a page, the admin's try-arguments box).
    """
    applying = []
    for limit in sorted(policy.cumulative, key=lambda spec: (spec.rule_id or 0, spec.name)):
        scope = scope_of(limit, policy.name, agent, stored)
        if scope is not None and limit.amount(arguments) is not None:
            applying.append((limit, scope))
    if locking:
        for limit, scope in applying:
            if limit.rule_id is not None:
                lock(limit.rule_id, scope)
    return {
        limit.name: Usage(window_total(tool_id, limit, scope, now - limit.window), scope.label)
        for limit, scope in applying
    }


def judge(
    policy: ToolPolicy,
    grant: GrantLike,
    agent: Agent,
    arguments: JSONObject,
    stored: JSONObject,
    tool_id: int,
    now: datetime,
) -> Verdict:
    """Inside the caller's transaction: lock the call's windows, read their totals and decide with them."""
    return evaluate(policy, grant, arguments, usage(policy, tool_id, agent, arguments, stored, now, locking=True))


def usage_now(policy: ToolPolicy, tool: Tool, agent: Agent | None, arguments: JSONObject) -> dict[str, Usage]:
    """Return the limits' window totals as they stand, locking nothing (the admin's try-arguments box).

    Without an agent, limits per agent are left out.
    """
    stored, _ = sensitive.split(tool, arguments)
    return usage(policy, tool.pk, agent, arguments, stored, timezone.now(), locking=False)


class ReplayWindows:
    """The windows of a policy's cumulative limits, kept while stored calls are replayed oldest first (what-if).

    A replayed call's window holds the earlier replayed calls counted as the calls stand now
    (their stored status), which is what the live windows would have held.
    """

    def __init__(self, policy: ToolPolicy) -> None:
        self.policy = policy
        self.seen: dict[tuple[str, str], deque[tuple[datetime, int | float]]] = {}

    def usage(self, agent_name: str, arguments: JSONValue, created_at: datetime) -> dict[str, Usage]:
        """Return each applying limit's total before a call made at `created_at`."""
        found = {}
        for limit, key, label in self._scopes(agent_name, arguments):
            window = self.seen.setdefault((limit.name, key), deque())
            while window and window[0][0] <= created_at - limit.window:
                window.popleft()
            found[limit.name] = Usage(sum(amount for _, amount in window), label)
        return found

    def add(self, agent_name: str, arguments: JSONValue, created_at: datetime, status: str) -> None:
        """Count a replayed call in its windows, if its status is one a window counts."""
        if status not in COUNTED_STATUSES:
            return
        for limit, key, _ in self._scopes(agent_name, arguments):
            amount = limit.amount(arguments)
            if amount is not None:
                self.seen.setdefault((limit.name, key), deque()).append((created_at, amount))

    def _scopes(self, agent_name: str, arguments: JSONValue) -> list[tuple[CumulativeSpec, str, str]]:
        if not isinstance(arguments, dict):
            return []
        scopes = []
        for limit in self.policy.cumulative:
            if limit.per == "agent":
                scopes.append((limit, agent_name, agent_name))
            elif limit.per == "tool":
                scopes.append((limit, "", self.policy.name))
            elif limit.resource_argument in arguments:
                value = arguments[limit.resource_argument]
                label = value if isinstance(value, str) else canonical_hash(value)[:12]
                scopes.append((limit, canonical_hash(value), f"{limit.resource_argument} {label}"))
        return scopes
