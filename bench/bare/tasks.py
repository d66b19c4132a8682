"""The bare Celery round trip: the worker marks one row done."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from bench.bare.models import BareRow


@shared_task(name="bench.bare.touch", ignore_result=True)
def touch(*, row_id: int) -> None:
    """Mark the row done (the client polls for it)."""
    BareRow.objects.filter(pk=row_id).update(done_at=timezone.now())
