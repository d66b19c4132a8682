"""What a message says about a call: plain, safe values, formatted as the console formats them.

Every argument a message shows passes through `shown_arguments`, which hides what the
tool marks sensitive; no secret and no raw argument leaves any other way.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from approvals.models import ToolCall
from approvals.views import present
from audit.typealiases import JSONObject
from notifications import links
from toolcatalog.sensitive import mask_arguments


def shown_arguments(call: ToolCall) -> JSONObject:
    """Return the call's arguments as a message may show them: every value the tool marks sensitive masked."""
    masked = mask_arguments(call.tool, call.arguments)
    return masked if isinstance(masked, dict) else {}


def site_url(path: str) -> str:
    return f"{settings.GATEHOUSE_SITE_URL}{path}"


@dataclass(frozen=True)
class CallCard:
    """A call as every channel shows it."""

    call_id: str
    tool: str
    agent: str
    status: str
    tier: int | None
    reasons: list[str]
    key_argument: tuple[str, str] | None
    arguments: list[tuple[str, str]]
    time_left: str
    call_url: str
    decide_url: str
    arguments_hash: str
    tool_version: int | None
    justification: str


def card(call: ToolCall, now: datetime | None = None) -> CallCard:
    """Return the call's card: what it is, why it is held, how long is left, where to act."""
    shown = shown_arguments(call)
    return CallCard(
        call_id=str(call.pk),
        tool=call.tool.name,
        agent=call.proposer,  # "support-agent for carla@…" when an OAuth client acted for a person
        status=call.get_status_display(),
        tier=call.risk_tier,
        reasons=[_reason(reason) for reason in call.risk_reasons or []],
        key_argument=present.headline(shown, call.tool.resource_argument),
        arguments=[(name, present.format_value(name, value)) for name, value in shown.items()],
        time_left=time_left(call, now or timezone.now()),
        call_url=site_url(reverse("approvals:call", args=[call.pk])),
        decide_url=site_url(reverse("notifications:decide", args=[links.token_for(call)])),
        arguments_hash=call.arguments_hash,
        tool_version=call.tool_version,
        justification=call.justification[:500],
    )


def _reason(reason: object) -> str:
    if isinstance(reason, dict):
        return str(reason.get("description") or reason.get("rule") or reason.get("name") or reason)
    return str(reason)


def time_left(call: ToolCall, now: datetime) -> str:
    """Return how long the call may still be approved ("3h 05m"), "expired", or "" when it does not expire."""
    if call.expires_at is None:
        return ""
    left = call.expires_at - now
    return present.compact_duration(left) if left.total_seconds() > 0 else "expired"


def subject(event_type: str, c: CallCard) -> str:
    """Return a one-line summary: the event, the tool, the key argument, the agent."""
    key = f" {c.key_argument[1]}" if c.key_argument else ""
    return f"[Gatehouse] {TITLES.get(event_type, event_type)}: {c.tool}{key} by {c.agent}"


TITLES = {
    "call.pending": "Approval needed",
    "call.reminder": "Reminder, approval needed",
    "call.escalated": "Escalated, still undecided",
    "call.decided": "Decided",
    "call.succeeded": "Succeeded",
    "call.failed": "Failed",
    "call.needs_reconciliation": "Needs reconciliation",
    "breaker.opened": "Circuit breaker opened",
    "gatehouse.test": "Test event",
}
