"""Budgets: how many calls an agent may have accepted, per conversation and per window of time.

A budget is spent in the transaction that stores the call, by an UPDATE of a
counter row that records the limit it counts against (`cap`) under a constraint
(`used <= cap`): the database decides which call is the last one allowed, however
many web processes race for it. If the call is not stored after all (a replay,
whose insert loses to the unique key, or another budget that is exhausted) the
transaction rolls back and nothing is spent. The per-agent window applies whatever the proposal's envelope
says, so omitting or changing `conversation_id` escapes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django.db.models import F

from agents.models import Agent, BudgetCounter, BudgetScope


@dataclass(frozen=True)
class Budget:
    """One budget a proposal spends from: its counter's scope and key, and its limit."""

    scope: BudgetScope
    key: str
    limit: int


class BudgetExhausted(Exception):
    """The budget has no call left; nothing was spent (the caller's transaction must roll back)."""

    def __init__(self, budget: Budget, retry_after: int | None = None) -> None:
        super().__init__(f"{budget.scope} budget of {budget.limit} calls exhausted")
        self.budget = budget
        self.retry_after = retry_after


def window_limit(agent: Agent) -> int:
    """Return how many calls the agent may have accepted per window (0 = no limit)."""
    own = agent.max_calls_per_window
    return settings.GATEHOUSE_AGENT_BUDGET_CALLS if own is None else own


def window_start(now: datetime) -> int:
    """Return the start (seconds since the epoch) of the fixed window holding `now`."""
    size = settings.GATEHOUSE_AGENT_BUDGET_WINDOW_SECONDS
    return int(now.timestamp()) // size * size


def budgets_for(agent: Agent, conversation_id: str, now: datetime) -> list[Budget]:
    """Return the budgets a call of `agent` in `conversation_id` spends from, window first.

    Every proposal spends in this one order, so two never lock the same two counter
    rows in opposite orders (which would deadlock).
    """
    budgets = []
    per_window = window_limit(agent)
    if per_window:
        start = datetime.fromtimestamp(window_start(now), tz=UTC).isoformat()
        budgets.append(Budget(BudgetScope.WINDOW, start, per_window))
    if agent.max_calls_per_conversation and conversation_id:
        budgets.append(Budget(BudgetScope.CONVERSATION, conversation_id, agent.max_calls_per_conversation))
    return budgets


def spend(agent: Agent, budgets: list[Budget], now: datetime) -> None:
    """Spend one call from each budget, inside the caller's transaction; raise BudgetExhausted if one has none.

    The rows stay locked until the caller's transaction ends, so the next proposal
    in the same scope waits, then decides on the count this one left.
    """
    for budget in budgets:
        if _spend_one(agent, budget):
            continue
        # No row yet (the scope's first call) or no call left: create the row if it is missing
        # (ignoring one another process just created), then let the conditional UPDATE decide.
        BudgetCounter.objects.bulk_create(
            [BudgetCounter(agent=agent, scope=budget.scope, key=budget.key, cap=budget.limit)], ignore_conflicts=True
        )
        if not _spend_one(agent, budget):
            raise BudgetExhausted(budget, seconds_left(budget, now))


def _spend_one(agent: Agent, budget: Budget) -> bool:
    """Count one call in the budget's counter if it has one left (`used < limit`, decided by the database)."""
    counter = BudgetCounter.objects.filter(agent=agent, scope=budget.scope, key=budget.key, used__lt=budget.limit)
    return bool(counter.update(used=F("used") + 1, cap=budget.limit))


def seconds_left(budget: Budget, now: datetime) -> int | None:
    """Return the seconds until a window budget refills (None for a conversation's, which never does)."""
    if budget.scope != BudgetScope.WINDOW:
        return None
    return max(1, window_start(now) + settings.GATEHOUSE_AGENT_BUDGET_WINDOW_SECONDS - int(now.timestamp()))


def exhausted(agent: Agent, conversation_id: str, now: datetime) -> BudgetExhausted | None:
    """Return which budget a call would find exhausted, spending nothing (for dry runs: a read, not a decision)."""
    return first_spent_out(agent, budgets_for(agent, conversation_id, now), now)


def first_spent_out(agent: Agent, budgets: list[Budget], now: datetime) -> BudgetExhausted | None:
    """Return the first of `budgets` with no call left, as read now."""
    for budget in budgets:
        used = (
            BudgetCounter.objects.filter(agent=agent, scope=budget.scope, key=budget.key)
            .values_list("used", flat=True)
            .first()
        )
        if used is not None and used >= budget.limit:
            return BudgetExhausted(budget, seconds_left(budget, now))
    return None
