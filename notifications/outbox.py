"""Deliveries: written by routing (notifications.intake), sent after commit, each at most once per channel.

A delivery moves pending → sending (a compare-and-set that takes a lease and counts
the attempt) → delivered, or back to pending with a backoff, or failed once its
attempts are spent. A worker that dies mid-send leaves its lease to run out; the
sweeper then makes the delivery pending again and sends it, under the same delivery
id, so a receiver that dedupes on it sees the event once.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta
from functools import partial

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from approvals.messages import CeleryApp, fail_fast_producers
from audit.models import Event
from audit.typealiases import JSONObject
from notifications.models import Channel, Delivery, DeliveryStatus, Route

log = logging.getLogger(__name__)

DELIVER = "notifications.tasks.deliver"
# A fresh delivery's own message should reach a worker first; the sweeper re-sends only after this.
SWEEP_GRACE = timedelta(seconds=5)
# What of an audit event a message may carry: never its arguments (rendered, masked, at send time).
EVENT_FIELDS = ("status", "to", "risk_tier", "risk_reasons", "reason", "approvals", "failure_kind", "expires_at")


def payload_of(event: Event, event_type: str) -> JSONObject:
    """Return what a delivery keeps of the event: who, what, when, and the event's own few plain fields."""
    data = event.data if isinstance(event.data, dict) else {}
    kept: JSONObject = {name: data[name] for name in EVENT_FIELDS if name in data}
    return {
        "type": event_type,
        "action": event.action,
        "seq": event.seq,  # routing reads sealed events only (notifications.intake): never None here
        "time": event.created_at.isoformat(),
        "call_id": str(event.call_id) if event.call_id else None,
        "agent": event.agent_name,
        "tool": event.tool_name,
        "event": kept,
    }


def rows_for(
    routes: Iterable[Route], event_type: str, key: str, call_id: uuid.UUID | None, payload: JSONObject
) -> list[Delivery]:
    """Return a delivery per channel (the first route naming a channel speaks for it)."""
    by_channel: dict[int, Delivery] = {}
    due = timezone.now() + SWEEP_GRACE
    for route in routes:
        by_channel.setdefault(
            route.channel_id,
            Delivery(
                route=route,
                channel=route.channel,
                event_type=event_type,
                event_key=key,
                call_id=call_id,
                payload=payload,
                due_at=due,
            ),
        )
    return list(by_channel.values())


def add(rows: list[Delivery]) -> None:
    """Store the deliveries (a taken (channel, event) is skipped) and send them once the transaction commits."""
    if not rows:
        return
    Delivery.objects.bulk_create(rows, ignore_conflicts=True)
    # Robust: a broker that is down fails nothing; the sweeper sends these later.
    transaction.on_commit(partial(enqueue_all, [row.pk for row in rows]), robust=True)


def enqueue_all(ids: Iterable[uuid.UUID]) -> None:
    for pk in ids:
        enqueue(pk)


def enqueue(pk: uuid.UUID) -> bool:
    """Send the deliver task; return False (and log) if the broker is unreachable: the sweeper sends it later."""
    return send_task(DELIVER, {"delivery_id": str(pk)})


def send_task(name: str, kwargs: JSONObject, countdown: float | None = None) -> bool:
    """Send a task by name (to run `countdown` s from now) without waiting for a broker that is down; say if sent."""
    app: CeleryApp = current_app._get_current_object()  # type: ignore[attr-defined]
    try:
        # approvals' producers: they give up at once when the broker is down, rather than retrying for seconds.
        with fail_fast_producers(app).acquire(block=True, timeout=2) as producer:
            app.send_task(name, kwargs=kwargs, retry=False, producer=producer, countdown=countdown)
    except Exception as exc:  # noqa: BLE001 — any broker failure; the sweeper sends deliveries again
        log.warning("broker unreachable (%s); %s %s not sent", exc, name, kwargs)
        return False
    return True


def new_test_delivery(channel: Channel) -> Delivery:
    """Store a test event for `channel` (a fresh key each time, so every test is sent)."""
    payload: JSONObject = {"type": "gatehouse.test", "action": "gatehouse.test", "time": timezone.now().isoformat()}
    return Delivery.objects.create(
        channel=channel, event_type="gatehouse.test", event_key=f"test-{uuid.uuid4().hex}", payload=payload
    )


def add_test_event(channel: Channel) -> Delivery:
    """Store a test event for `channel` and have a worker send it once this commits."""
    with transaction.atomic():
        row = new_test_delivery(channel)
        transaction.on_commit(partial(enqueue, row.pk), robust=True)
    return row


# ------------------------------------------------------------------ one attempt


def lease() -> timedelta:
    return timedelta(seconds=settings.GATEHOUSE_NOTIFY_LEASE_SECONDS)


def claim(pk: uuid.UUID | str) -> Delivery | None:
    """Start an attempt (pending → sending, attempts + 1, a lease); None if another worker has it or it is done."""
    now = timezone.now()
    current = Delivery.objects.filter(pk=pk, status=DeliveryStatus.PENDING).values_list("attempts", flat=True).first()
    if current is None:
        return None
    won = Delivery.objects.filter(pk=pk, status=DeliveryStatus.PENDING, attempts=current).update(
        status=DeliveryStatus.SENDING, attempts=current + 1, due_at=now + lease()
    )
    if not won:
        return None
    return Delivery.objects.select_related("channel", "route").get(pk=pk)


def delivered(delivery: Delivery, external: JSONObject | None = None) -> bool:
    """End the attempt as delivered (only this attempt: a lease the sweeper took back writes nothing)."""
    fields: dict[str, object] = {"status": DeliveryStatus.DELIVERED, "delivered_at": timezone.now(), "last_error": ""}
    if external:
        fields["external"] = external
    return bool(_this_attempt(delivery).update(**fields))


def skipped(delivery: Delivery, why: str) -> bool:
    """End the attempt without sending: the message no longer concerns anyone (the call was decided)."""
    return bool(_this_attempt(delivery).update(status=DeliveryStatus.SKIPPED, last_error=why))


def failed_attempt(delivery: Delivery, error: str) -> datetime | None:
    """End a failed attempt: pending again after a backoff, or failed once attempts are spent; return the retry time."""
    if delivery.attempts >= settings.GATEHOUSE_NOTIFY_MAX_ATTEMPTS:
        _this_attempt(delivery).update(status=DeliveryStatus.FAILED, last_error=error[:2000])
        return None
    retry_at = timezone.now() + timedelta(seconds=backoff(delivery.attempts))
    _this_attempt(delivery).update(status=DeliveryStatus.PENDING, due_at=retry_at, last_error=error[:2000])
    return retry_at


def backoff(attempt: int) -> float:
    """Seconds before attempt `attempt + 1`: base × 2^(attempt − 1), at most ten minutes."""
    return float(min(settings.GATEHOUSE_NOTIFY_BACKOFF_SECONDS * 2 ** max(attempt - 1, 0), 600))


def _this_attempt(delivery: Delivery) -> QuerySet[Delivery]:
    return Delivery.objects.filter(pk=delivery.pk, status=DeliveryStatus.SENDING, attempts=delivery.attempts)


# ------------------------------------------------------------------ the sweeper


def sweep(now: datetime | None = None) -> dict[str, int]:
    """Take back leases that ran out (a worker died mid-send) and send every pending delivery that is due."""
    now = now or timezone.now()
    released = Delivery.objects.filter(status=DeliveryStatus.SENDING, due_at__lte=now).update(
        status=DeliveryStatus.PENDING, due_at=now
    )
    due = list(Delivery.objects.filter(status=DeliveryStatus.PENDING, due_at__lte=now).values_list("pk", flat=True))
    # Not before the grace again: the message just sent should be the one a worker takes.
    Delivery.objects.filter(pk__in=due, status=DeliveryStatus.PENDING).update(due_at=now + SWEEP_GRACE)
    sent = sum(enqueue(pk) for pk in due)
    return {"released": released, "resent": sent}
