"""JSON log lines (GATEHOUSE_LOG_FORMAT=json) name the call being handled, in the web process and the worker."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from approvals import telemetry
from approvals.models import ToolCall
from tests.conftest import refund
from tests.processes import CeleryWorker, wait_until


def formatted(message: str) -> dict[str, Any]:
    record = logging.LogRecord("approvals.test", logging.WARNING, __file__, 1, message, None, None)
    return json.loads(telemetry.JsonFormatter().format(record))


def test_a_json_line_outside_any_call_has_no_call_id() -> None:
    telemetry.CALL_ID.set(None)

    line = formatted("nothing to do with a call")

    assert line["message"] == "nothing to do with a call"
    assert line["level"] == "WARNING"
    assert line["logger"] == "approvals.test"
    assert "call_id" not in line


def test_a_proposals_lines_name_its_call_until_the_next_request(db: None, agent_api: Any) -> None:
    api = agent_api()

    # The test client serves the request in this thread, in this context: what its lines would carry.
    call_id = api.propose(refund(5000, idempotency_key="log-1")).json()["id"]
    after_the_proposal = formatted("the proposal's last line")
    api.tools()  # the next request on this thread
    after_the_next_request = formatted("a later line")

    assert after_the_proposal["call_id"] == call_id
    assert "call_id" not in after_the_next_request


@pytest.mark.worker
def test_the_workers_json_lines_name_the_call_it_executes(
    start_worker: Any, demo_services: str, agent_api: Any
) -> None:
    worker: CeleryWorker = start_worker(GATEHOUSE_LOG_FORMAT="json")

    call_id = agent_api().propose(refund(5000, idempotency_key="log-worker")).json()["id"]
    wait_until(lambda: ToolCall.objects.filter(pk=call_id, status="succeeded").exists(), timeout=20)

    # Celery's own "succeeded" line comes after the call's last commit: wait for it.
    wait_until(lambda: b"succeeded in" in worker.log_path.read_bytes(), timeout=10)

    lines = [json.loads(line) for line in worker.log_path.read_text().splitlines() if line.startswith("{")]
    about_the_call = [line for line in lines if line.get("call_id") == call_id]
    assert [line["message"] for line in about_the_call if "succeeded in" in line["message"]], worker.log()
    received = [line for line in lines if "received" in line["message"]]
    assert received and "call_id" not in received[0]  # taken from the queue: no call is being handled yet
