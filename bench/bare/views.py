"""The bare endpoints: parse the proposal's JSON and insert one row; the same, queued and waited for; and the
round trips of a governed call with none of Gatehouse's code."""

from __future__ import annotations

import json
import time
from contextlib import closing

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from bench.bare.models import BareRow
from bench.bare.notices import done_channel, redis_client
from config.celery import app

WAIT_SECONDS = 10.0


@csrf_exempt  # a machine endpoint like the agent API; the benchmark sends no cookie
@require_POST
def insert(request: HttpRequest) -> JsonResponse:
    """Store the posted JSON object as one row; return its id."""
    row = _stored(request)
    return JsonResponse({"id": row.pk}, status=201)


@csrf_exempt
@require_POST
def insert_and_wait(request: HttpRequest) -> JsonResponse:
    """Insert one row, queue the bare task for it and answer once the worker says it marked it.

    An auto-approved call's shape with none of Gatehouse's steps: one insert, one
    Celery message, one update by the worker, one Redis notice to the waiting
    request. What it costs is the floor of that shape on this stack.
    """
    row = _stored(request)
    return _queued_and_told(row, "bench.bare.touch_and_tell", {"row_id": row.pk})


@csrf_exempt
@require_POST
def governed_and_wait(request: HttpRequest) -> JsonResponse:
    """The round trips an auto-approved call cannot do without, with plain Django and none of Gatehouse's code.

    One read by a unique key before the insert (a proposal reads its agent and grant),
    the insert, one Celery message, and a task that commits a claim before calling the
    downstream, calls it, commits its answer and tells the waiting request
    (`bench.bare.claim_call_and_tell`). No pipeline, no audit events, no credential.
    """
    body = json.loads(request.body)
    BareRow.objects.filter(key=f"reader:{body['idempotency_key']}").first()
    row = BareRow.objects.create(key=body["idempotency_key"], payload=body)
    return _queued_and_told(row, "bench.bare.claim_call_and_tell", {"row_id": row.pk})


def _queued_and_told(row: BareRow, task: str, kwargs: dict[str, object]) -> JsonResponse:
    """Send `task` for the row and answer once the worker says it is done (subscribed first)."""
    with closing(redis_client().pubsub(ignore_subscribe_messages=True)) as pubsub:
        pubsub.subscribe(done_channel(row.pk))  # before the message is sent: the notice cannot be missed
        app.send_task(task, kwargs=kwargs)
        deadline = time.monotonic() + WAIT_SECONDS
        while pubsub.get_message(timeout=max(0.0, deadline - time.monotonic())) is None:
            if time.monotonic() >= deadline:
                return JsonResponse({"id": row.pk, "done": False}, status=504)
    return JsonResponse({"id": row.pk, "done": True}, status=201)


def _stored(request: HttpRequest) -> BareRow:
    """Parse the posted JSON object and insert it as one row."""
    body = json.loads(request.body)
    return BareRow.objects.create(key=body["idempotency_key"], payload=body)
