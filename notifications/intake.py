"""Reading the audit chain into deliveries: every notifiable event, once, in order.

The audit log tells of each event after its transaction commits (`audit.signals.
event_recorded`); the receiver only asks a worker to run `route_new_events`, and beat
runs it too, so an event whose signal was lost (a crash right after commit, a broker
that was down) is routed by the next run.

The cursor follows the sealed chain's seq, never the event's id: ids are taken at
insert, and a transaction that took a lower id can commit after one with a higher id,
so a cursor over ids would skip that late commit. Seq is given at sealing, to
committed events only, and only after the sealed head: "every sealed event after the
cursor, up to the head read first" is exactly the committed events not yet routed. A
run first seals what has committed (audit.sequencer.seal_all), so a notification does
not wait for the sequencer process.
"""

from __future__ import annotations

import uuid

from django.db import transaction
from django.db.models import Max

from approvals.models import ToolCall
from audit.models import Event
from audit.sequencer import seal_all
from notifications import outbox
from notifications.models import Cursor, Delivery, Route
from notifications.routing import NOTIFIED_ACTIONS, Facts, event_type_of, needs_tier, wants

BATCH = 500
# call.proposed is one only while the call waits: read it and ask event_type_of.
READ_ACTIONS = ("call.proposed", *NOTIFIED_ACTIONS)


def route_new_events(batch: int = BATCH) -> int:
    """Route the events committed since the last run (at most `batch`); return how many deliveries were written."""
    seal_all()  # its own transaction, before ours: the routing run does not hold the sealers' lock
    with transaction.atomic():
        cursor = _held_cursor()
        head = Event.objects.aggregate(head=Max("seq"))["head"] or 0  # the sealed head: unsealed events have no seq
        unrouted = Event.objects.filter(seq__gt=cursor.last_seq, seq__lte=head, action__in=READ_ACTIONS)
        events = list(unrouted.order_by("seq")[:batch])
        rows = _deliveries(events)
        outbox.add(rows)
        # A full batch stops at its last event; otherwise every event up to the head was read.
        cursor.last_seq = (events[-1].seq or head) if len(events) == batch else head  # read events are sealed
        cursor.save(update_fields=["last_seq"])
    return len(rows)


def _held_cursor() -> Cursor:
    """Return the cursor row, locked until commit (one routing run at a time)."""
    cursor = Cursor.objects.select_for_update().order_by("pk").first()
    return cursor if cursor is not None else Cursor.objects.create(last_seq=0)


def _deliveries(events: list[Event]) -> list[Delivery]:
    """Return the deliveries `events` call for under the enabled routes (read once)."""
    typed = [(event, kind) for event in events if (kind := event_type_of(event)) is not None]
    if not typed:
        return []
    routes = list(Route.objects.filter(enabled=True, channel__enabled=True).select_related("channel"))
    tiers = _tiers(typed, routes)
    rows: list[Delivery] = []
    for event, event_type in typed:
        facts = Facts(event_type, _tier(event, tiers), event.tool_name, event.agent_name)
        chosen = [route for route in routes if wants(route, facts)]
        payload = outbox.payload_of(event, event_type)
        rows += outbox.rows_for(chosen, event_type, f"event-{event.seq}", event.call_id, payload)
    return rows


def _tiers(typed: list[tuple[Event, str]], routes: list[Route]) -> dict[uuid.UUID, int | None]:
    """Return the tier of each call whose event does not say it, where a route filters by tier (one query)."""
    wanted = {
        event.call_id
        for event, kind in typed
        if event.call_id is not None and "risk_tier" not in event.data and needs_tier(routes, kind)
    }
    if not wanted:
        return {}
    return dict(ToolCall.objects.filter(pk__in=wanted).values_list("pk", "risk_tier"))


def _tier(event: Event, tiers: dict[uuid.UUID, int | None]) -> int | None:
    if "risk_tier" in event.data:
        tier = event.data["risk_tier"]
        return tier if isinstance(tier, int) else None
    return tiers.get(event.call_id) if event.call_id is not None else None
