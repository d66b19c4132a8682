"""Workers that die: before the downstream effect, and on every attempt (a poison task)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from approvals.models import ToolCall
from audit.chain import first_break
from audit.models import Event
from audit.sequencer import seal_all
from demo.models import Refund
from tests.conftest import refund
from tests.processes import CeleryWorker, wait_until
from toolcatalog.models import RiskTier, Tool

pytestmark = pytest.mark.worker
TERMINAL = {"succeeded", "failed", "needs_reconciliation"}


def actions(call_id: str) -> list[str]:
    seal_all()  # in chain order: sealed, as the sequencer does within a second
    return list(Event.objects.filter(call_id=call_id).order_by("seq").values_list("action", flat=True))


def test_a_worker_killed_before_the_effect_runs_it_once_after_restart(
    start_worker: Callable[..., CeleryWorker], demo_services: str, agent_api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The ledger holds the worker's request before applying anything.
    monkeypatch.setenv("GATEHOUSE_DEMO_FAULT", "pause_before_apply:PED-00000007")
    worker = start_worker()
    call_id = agent_api().propose(refund(2500, pedido="PED-00000007", idempotency_key="before")).json()["id"]
    wait_until(lambda: ToolCall.objects.filter(pk=call_id, status="executing").exists())
    time.sleep(0.5)  # the request is on its way to, or held by, the ledger

    worker.kill()
    monkeypatch.delenv("GATEHOUSE_DEMO_FAULT")  # the held request is dropped unapplied
    assert not Refund.objects.exists()
    worker.start()

    call = wait_until(lambda: ToolCall.objects.filter(pk=call_id, status__in=TERMINAL).first(), timeout=40)
    assert call.status == "succeeded", worker.log()
    assert call.attempts == 2
    assert Refund.objects.count() == 1
    assert actions(call_id).count("call.lease_expired") == 1
    # The worker minted scoped credentials for both attempts; none of them reached its log.
    assert "Bearer" not in worker.log() and "credential" not in worker.log().lower()


def restart_tolerating_death(worker: CeleryWorker) -> None:
    """Start the worker again; it may die right after it is ready (it takes the poison task at once)."""
    readies = worker.log_path.read_bytes().count(b" ready.")
    try:
        worker.start()
    except AssertionError:
        if worker.log_path.read_bytes().count(b" ready.") == readies:
            raise  # it died before it was ready: a real failure


def test_a_poison_task_that_kills_every_worker_is_bounded_by_the_attempt_limit(
    start_worker: Callable[..., CeleryWorker], catalog: dict[str, Tool], agent_api: Any
) -> None:
    Tool.objects.create(
        name="poison",
        description="Takes its worker down.",
        input_schema={"type": "object"},
        base_tier=RiskTier.objects.get(level=0),
        executor_kind="python",
        executor_ref="tests.poison.WorkerKillingExecutor",
    )
    poisoner = agent_api("poisoner", {"poison": 0})
    worker, restarts = start_worker(), 0
    call_id = poisoner.propose({"tool": "poison", "arguments": {}}).json()["id"]
    deadline = time.monotonic() + 120
    while not ToolCall.objects.filter(pk=call_id, status__in=TERMINAL).exists():
        assert time.monotonic() < deadline, worker.log()
        if not worker.running:  # a supervisor brings the dead worker back
            worker.kill()
            restart_tolerating_death(worker)
            restarts += 1
        time.sleep(0.2)

    call = ToolCall.objects.get(pk=call_id)
    # Three attempts (the limit), each killed its worker; then a person is asked, never a fourth run.
    assert call.attempts == 3 and restarts >= 3
    assert call.status == "needs_reconciliation"
    assert actions(call_id).count("call.execution_started") == 3
    assert first_break() is None
