"""Finding an agent's grant for a tool, with what a proposal needs to be judged.

`find_grant()` returns the grant with its tool and base tier, annotated with the
circuit breaker's state (`breaker_open`, `breaker_failures`): one statement.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Exists, OuterRef, Subquery

from agents.models import Agent, CircuitBreaker, Grant


def find_grant(agent: Agent, tool_name: str) -> Grant | None:
    """Return the agent's grant for the enabled tool `tool_name`, annotated; None if there is none."""
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


@dataclass(frozen=True)
class ReadGrant:
    """The grant read for `tool_name` (`grant` None: the agent has none for an enabled tool by that name)."""

    tool_name: str
    grant: Grant | None
