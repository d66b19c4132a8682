"""The bare Celery round trip: the worker marks one row done (and, for the bare composite, says so).

And the bare governed shape's task: claim, call the downstream, record, tell.
"""

from __future__ import annotations

import functools
import json
import os

import urllib3
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


@shared_task(name="bench.bare.claim_call_and_tell", ignore_result=True)
def claim_call_and_tell(*, row_id: int) -> None:
    """Commit a claim, POST to the instant downstream, commit its answer, publish that the row is done.

    Each update runs on its own (autocommit): the claim is durable before the call, the
    answer before the notice, as for a governed call; the claim is a compare-and-set.
    The downstream is the one the bench's copy of search_seats calls (`BenchSettings.instant_endpoint`).
    """
    if not BareRow.objects.filter(pk=row_id, claimed_at=None).update(claimed_at=timezone.now()):
        return
    answer = _downstream().request(
        "POST",
        os.environ["BENCH_INSTANT_ENDPOINT"],
        body=json.dumps({"row_id": row_id}),
        headers={"Content-Type": "application/json"},
    )
    BareRow.objects.filter(pk=row_id).update(done_at=timezone.now(), result=json.loads(answer.data))
    redis_client().publish(done_channel(row_id), "done")


@functools.cache
def _downstream() -> urllib3.PoolManager:
    """One pool per process, as the HTTP executor keeps (no retries, no redirects)."""
    return urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(connect=2.0, read=10.0))


def _mark_done(row_id: int) -> None:
    BareRow.objects.filter(pk=row_id).update(done_at=timezone.now())
