"""Circuit breakers: N consecutive failures of one kind, or M of any kinds, for one agent and tool open it.

An open breaker refuses the agent's proposals for that tool (`circuit_open`) until a
reviewer resets it; it is how a confused model stuck in a loop reaches a person.
Counting any kind as well catches the loop that alternates between failures
(invalid arguments, then a tier too high, then invalid arguments again…), which
never makes N of one kind in a row.
"""

from __future__ import annotations

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents.models import CircuitBreaker
from audit.chain import record
from audit.models import ActorKind


def threshold() -> int:
    """Return how many consecutive failures of one kind open a breaker."""
    return settings.GATEHOUSE_BREAKER_THRESHOLD


def any_kind_threshold() -> int:
    """Return how many consecutive failures of any kinds open a breaker (0: only failures of one kind do)."""
    return settings.GATEHOUSE_BREAKER_ANY_KIND_THRESHOLD


def trips(breaker: CircuitBreaker) -> bool:
    """Return whether the breaker's counts have reached either threshold."""
    any_kind = any_kind_threshold()
    return breaker.consecutive_failures >= threshold() or bool(any_kind and breaker.consecutive_any_kind >= any_kind)


def record_failure(*, agent_id: int, tool_id: int, kind: str, agent_name: str, tool_name: str) -> bool:
    """Count a failure (inside the caller's transaction); return True if it opened the breaker."""
    breaker, _ = CircuitBreaker.objects.select_for_update().get_or_create(agent_id=agent_id, tool_id=tool_id)
    if breaker.failure_kind == kind:
        breaker.consecutive_failures += 1
    else:
        breaker.failure_kind, breaker.consecutive_failures = kind, 1
    breaker.consecutive_any_kind += 1
    opened = breaker.opened_at is None and trips(breaker)
    if opened:
        breaker.opened_at = timezone.now()
        record(
            "circuit.opened",
            actor=(ActorKind.SYSTEM, "gatehouse"),
            agent_name=agent_name,
            tool_name=tool_name,
            data={
                "failure_kind": kind,
                "consecutive_failures": breaker.consecutive_failures,
                "consecutive_any_kind": breaker.consecutive_any_kind,
            },
        )
    breaker.save()
    return opened


def record_success(*, agent_id: int, tool_id: int) -> None:
    """Reset the counts of consecutive failures (an open breaker stays open until reset)."""
    CircuitBreaker.objects.filter(
        agent_id=agent_id, tool_id=tool_id, opened_at__isnull=True, consecutive_any_kind__gt=0
    ).update(consecutive_failures=0, consecutive_any_kind=0, failure_kind="")


@transaction.atomic
def reset(breaker: CircuitBreaker, *, by: str) -> bool:
    """Close an open breaker; return whether this caller closed it."""
    closed = CircuitBreaker.objects.filter(pk=breaker.pk, opened_at__isnull=False).update(
        opened_at=None, consecutive_failures=0, consecutive_any_kind=0, failure_kind=""
    )
    if closed:
        record(
            "circuit.reset",
            actor=(ActorKind.REVIEWER, by),
            agent_name=breaker.agent.name,
            tool_name=breaker.tool.name,
            data={"failure_kind": breaker.failure_kind},
        )
    return bool(closed)
