"""Reminders at 50 % and 90 % of a pending call's approval window, and the escalation when 90 % passes.

Run from beat (the sweep task). Each stage of each call is routed once: a Reminder row
(unique per call and stage) is its claim, so two beats never double it. A call decided
before a stage is due is not pending, so nothing is routed; one decided between routing
and sending is skipped by the sender.
"""

from __future__ import annotations

from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import DateTimeField, DurationField, ExpressionWrapper, F, Value
from django.utils import timezone

from approvals.models import ToolCall
from approvals.states import Status
from audit.typealiases import JSONObject
from notifications import outbox
from notifications.models import EventType, Reminder, Route
from notifications.routing import Facts, wants

# (stage, fraction of the window, event)
STAGES = (("50", 0.5, EventType.REMINDER), ("90", 0.9, EventType.REMINDER), ("escalation", 0.9, EventType.ESCALATED))


def route_due(now: datetime | None = None) -> dict[str, int]:
    """Route every stage that fell due for a pending call; return how many were routed."""
    now = now or timezone.now()
    routed = 0
    for call in _waiting(now):
        routed += sum(
            _route_stage(call, stage, event_type, now)
            for stage, fraction, event_type in STAGES
            if _due(call, fraction, now)
        )
    return {"reminders": routed}


def _waiting(now: datetime) -> list[ToolCall]:
    """Return pending calls past half their window (the first stage) and not yet escalated (the last)."""
    escalated = Reminder.objects.filter(stage="escalation").values("call_id")
    calls = ToolCall.objects.filter(status=Status.PENDING_APPROVAL, expires_at__isnull=False, expires_at__gt=now)
    # Half the window has passed when what is left (expires_at − now) is no more than what passed (now − created_at).
    passed = ExpressionWrapper(Value(now) - F("created_at"), output_field=DurationField())
    half_gone = calls.filter(expires_at__lte=ExpressionWrapper(Value(now) + passed, output_field=DateTimeField()))
    return list(half_gone.exclude(pk__in=escalated).select_related("agent", "tool"))


def _due(call: ToolCall, fraction: float, now: datetime) -> bool:
    assert call.expires_at is not None
    return call.created_at + (call.expires_at - call.created_at) * fraction <= now


def _route_stage(call: ToolCall, stage: str, event_type: str, now: datetime) -> bool:
    """Claim the stage for the call and write its deliveries; False if it was claimed before."""
    facts = Facts(event_type=event_type, tier=call.risk_tier, tool=call.tool.name, agent=call.agent.name)
    try:
        with transaction.atomic():
            Reminder.objects.create(call_id=call.pk, stage=stage)
            routes = Route.objects.filter(enabled=True, channel__enabled=True).select_related("channel")
            chosen = [route for route in routes if wants(route, facts)]
            outbox.add(outbox.rows_for(chosen, event_type, f"{stage}:{call.pk}", call.pk, _payload(call, stage, now)))
    except IntegrityError:
        return False
    return True


def _payload(call: ToolCall, stage: str, now: datetime) -> JSONObject:
    percent = 90 if stage == "escalation" else int(stage)
    return {
        "type": EventType.ESCALATED if stage == "escalation" else EventType.REMINDER,
        "action": f"call.{'escalated' if stage == 'escalation' else 'reminder'}",
        "time": now.isoformat(),
        "call_id": str(call.pk),
        "agent": call.agent.name,
        "tool": call.tool.name,
        "event": {"percent": percent, "expires_at": call.expires_at.isoformat() if call.expires_at else None},
    }
