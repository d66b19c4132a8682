"""Crashes and outages with real processes: a worker SIGKILLed mid-attempt, Redis stopped and started."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from approvals.models import ToolCall
from audit.models import Event
from audit.sequencer import seal_all
from demo.models import Refund
from tests.conftest import refund
from tests.processes import CeleryWorker, RedisServer, use_broker, wait_until

pytestmark = pytest.mark.worker

TERMINAL = {"succeeded", "failed", "needs_reconciliation"}


def actions(call_id: str) -> list[str]:
    seal_all()  # in chain order: sealed, as the sequencer does within a second
    return list(Event.objects.filter(call_id=call_id).order_by("seq").values_list("action", flat=True))


def settled(call_id: str, timeout: float) -> ToolCall:
    return wait_until(lambda: ToolCall.objects.filter(pk=call_id, status__in=TERMINAL).first(), timeout=timeout)


def test_a_worker_killed_after_the_refund_was_applied_ends_succeeded_with_one_ledger_row(
    start_worker: Callable[..., CeleryWorker],
    demo_services: str,
    agent_api: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The ledger commits the refund, then holds its answer: the worker is waiting for it.
    monkeypatch.setenv("GATEHOUSE_DEMO_FAULT", "pause_after_apply:PED-00000006")
    worker = start_worker()
    call_id = agent_api().propose(refund(2000, pedido="PED-00000006", idempotency_key="crash")).json()["id"]
    wait_until(lambda: Refund.objects.filter(order__order_id="PED-00000006").exists())
    call = ToolCall.objects.get(pk=call_id)
    assert (call.status, call.result) == ("executing", None)  # applied downstream, not recorded by Gatehouse

    worker.kill()
    monkeypatch.delenv("GATEHOUSE_DEMO_FAULT")  # the held answer now goes to a dead socket
    worker.start()

    call = settled(call_id, timeout=30)
    assert call.status == "succeeded", worker.log()
    assert call.attempts == 2
    assert call.result["replayed"] is True  # the second attempt sent the same key and got the same refund
    assert Refund.objects.count() == 1
    assert Refund.objects.get().idempotency_key == f"gatehouse-call-{call_id}"
    assert actions(call_id) == [
        "call.proposed",
        "call.execution_started",
        "call.lease_expired",
        "call.requeued",
        "call.execution_started",
        "call.executed",
        "call.succeeded",
    ]


def test_redis_stopped_while_a_call_is_approved_gives_no_5xx_and_the_call_runs_once_redis_is_back(
    start_worker: Callable[..., CeleryWorker],
    private_redis: RedisServer,
    demo_services: str,
    agent_api: Any,
) -> None:
    worker = start_worker(broker_url=private_redis.url)
    api = agent_api()
    with use_broker(private_redis.url):
        private_redis.stop()
        started = time.monotonic()
        response = api.propose(refund(1000, pedido="PED-00000007", idempotency_key="outage"))
        elapsed = time.monotonic() - started
        call_id = response.json()["id"]

        assert response.status_code == 201
        assert response.json()["status"] == "approved"
        assert elapsed < 2
        time.sleep(1)
        assert api.get(call_id).json()["status"] == "approved"
        assert not Refund.objects.exists()

        private_redis.start()
        call = settled(call_id, timeout=45)

    assert call.status == "succeeded", worker.log()
    assert call.attempts == 1
    assert Refund.objects.count() == 1
    assert "call.requeued" in actions(call_id)
