"""The execution message: what it says of its call, and sending it.

Sent only after the approving transaction commits; a broker that is down at that
moment costs nothing, because the sweeper re-sends approved calls nobody claimed.
The task is named, not imported: the worker's side (`approvals.tasks`) imports the
execution code, which sends messages.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from celery import Celery, Task, current_app
from django.db import transaction
from kombu import pools
from kombu.pools import ProducerPool

from approvals import telemetry
from approvals.models import ToolCall

log = logging.getLogger(__name__)

EXECUTE_CALL = "approvals.tasks.execute_call"
# The app that sends the message; its tasks' signatures do not matter here (celery-types' default spells them
# Any, which the type check refuses).
CeleryApp = Celery[Task[[], object]]


@dataclass(frozen=True)
class Sent:
    """What an execution message says of its call when it was sent (see `approvals.lifecycle.claim_as_sent`)."""

    attempts: int
    agent: str
    tool: str

    @classmethod
    def of(cls, call: ToolCall) -> Sent:
        return cls(attempts=call.attempts, agent=call.agent.name, tool=call.tool.name)


def enqueue(call: ToolCall, countdown: float | None = None) -> bool:
    """Send the execution task; return False (and log) if the broker is unreachable.

    The message says what the call is as sent (attempt number, tool and agent names),
    so the worker can claim it without reading it first, and carries the trace context
    the call keeps (its execution continues the agent's trace, `approvals.telemetry`).
    """
    sent = Sent.of(call)
    kwargs = {"call_id": str(call.pk), "attempts": sent.attempts, "agent": sent.agent, "tool": sent.tool}
    # The app itself, not the proxy (its id keys the producer pools); celery-types types current_app as the app.
    app: CeleryApp = current_app._get_current_object()  # type: ignore[attr-defined]
    try:
        with fail_fast_producers(app).acquire(block=True, timeout=2) as producer:
            app.send_task(
                EXECUTE_CALL,
                kwargs=kwargs,
                countdown=countdown,
                retry=False,
                producer=producer,
                headers=telemetry.message_headers(call.traceparent, call.tracestate),
            )
    except Exception as exc:  # noqa: BLE001 — any broker failure; the sweeper sends it again
        log.warning("broker unreachable (%s); call %s left to the sweeper", exc, call.pk)
        return False
    return True


def enqueue_on_commit(call: ToolCall) -> None:
    """Send the call's execution task once the current transaction commits."""
    transaction.on_commit(lambda: enqueue(call))


def fail_fast_producers(app: CeleryApp) -> ProducerPool:
    """Return this process's producers whose connection gives up at once when the broker is down.

    Celery's own pool would retry the connection for seconds first, and the proposal
    that enqueues waits for it; the sweeper is the retry here.
    """
    key = (id(app), os.getpid(), app.conf.broker_write_url or app.conf.broker_url)
    pool = _producer_pools.get(key)
    if pool is None:  # looked up by key: building a Connection to look it up would be work on every message
        options = {**app.conf.broker_transport_options, "max_retries": 0}
        broker = app.connection_for_write(transport_options=options, connect_timeout=1)
        pool = _producer_pools[key] = pools.producers[broker]  # kept by kombu too
    return pool


_producer_pools: dict[tuple[int, int, str | None], ProducerPool] = {}
