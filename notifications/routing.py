"""Which recorded audit events are notifications, and which routes want each: pure functions over plain values."""

from __future__ import annotations

from dataclasses import dataclass

from audit.models import Event
from notifications.models import EventType, Route

# An audit action → the notification it is. `call.proposed` is one only while the call waits (below).
NOTIFIED_ACTIONS = {
    "call.returned_for_approval": EventType.PENDING,
    "call.approved": EventType.DECIDED,
    "call.rejected": EventType.DECIDED,
    "call.expired": EventType.DECIDED,
    "call.withdrawn": EventType.DECIDED,
    "call.refused_on_policy_change": EventType.DECIDED,
    "call.succeeded": EventType.SUCCEEDED,
    "call.failed": EventType.FAILED,
    "call.needs_reconciliation": EventType.NEEDS_RECONCILIATION,
    "circuit.opened": EventType.BREAKER_OPENED,
}
# Sent only to routes that name them: a second route, not everyone again.
EXPLICIT_ONLY = frozenset({EventType.ESCALATED})


@dataclass(frozen=True)
class Facts:
    """What routing looks at: the event's type, and the call's tier, tool and agent (tier None: not a call's)."""

    event_type: str
    tier: int | None
    tool: str
    agent: str


def event_type_of(event: Event) -> str | None:
    """Return the notification an audit event is, or None if it is none."""
    if event.action == "call.proposed":
        return EventType.PENDING if event.data.get("status") == "pending_approval" else None
    return NOTIFIED_ACTIONS.get(event.action)


def names_event(route: Route, event_type: str) -> bool:
    """Return whether `route` takes events of this type (escalations only where named)."""
    if event_type in route.events:
        return True
    return not route.events and event_type not in EXPLICIT_ONLY


def wants(route: Route, facts: Facts) -> bool:
    """Return whether `route` takes this event: its type, tier (calls only), tool and agent all match."""
    if not names_event(route, facts.event_type):
        return False
    if facts.tier is not None and facts.tier < route.min_tier:
        return False
    if route.tools and facts.tool not in route.tools:
        return False
    return not (route.agents and facts.agent not in route.agents)


def needs_tier(routes: list[Route], event_type: str) -> bool:
    """Return whether deciding among `routes` needs the call's tier (some route filters by it)."""
    return any(route.min_tier > 0 and names_event(route, event_type) for route in routes)
