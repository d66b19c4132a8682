"""The bare Celery round trip: the worker marks one row done (and, for the bare composite, says so)."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from bench.bare.models import BareRow
from bench.bare.notices import done_channel, redis_client


@shared_task(name="bench.bare.touch", ignore_result=True)
def touch(*, row_id: int) -> None:
    """Mark the row done (the client polls for it)."""
    _mark_done(row_id)


@shared_task(name="bench.bare.touch_and_tell", ignore_result=True)
def touch_and_tell(*, row_id: int) -> None:
    """Mark the row done and publish that it is (the bare composite's request waits for it)."""
    _mark_done(row_id)
    redis_client().publish(done_channel(row_id), "done")


def _mark_done(row_id: int) -> None:
    BareRow.objects.filter(pk=row_id).update(done_at=timezone.now())
