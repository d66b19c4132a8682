"""Execution end to end: the API, a real Celery worker process, the demo services over HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from approvals import lifecycle
from approvals.models import ToolCall
from approvals.tasks import execute_call
from audit.chain import first_break
from audit.models import Event
from demo.models import Order, Refund
from tests.conftest import refund
from tests.processes import BASE_DIR, CeleryWorker, free_port, http_server, wait_until
from toolcatalog.executors import ExecutionContext, PermanentError, RetryableError
from toolcatalog.executors.http import GatehouseProtocolExecutor

pytestmark = pytest.mark.worker

TERMINAL = {"succeeded", "failed", "needs_reconciliation", "refused", "rejected", "expired"}


def actions(call_id: str) -> list[str]:
    return list(Event.objects.filter(call_id=call_id).order_by("seq").values_list("action", flat=True))


def observed(call_id: str) -> dict[str, Any]:
    """Return what the call's verification recorded."""
    return Event.objects.get(call_id=call_id, action="call.succeeded").data


def settled(call_id: str, timeout: float = 20) -> ToolCall:
    """Wait until the call reaches a terminal state; return it."""
    return wait_until(lambda: ToolCall.objects.filter(pk=call_id, status__in=TERMINAL).first(), timeout=timeout)


def reviewer(username: str = "rita") -> Any:
    user = get_user_model().objects.create_user(username, password="x")
    user.user_permissions.add(Permission.objects.get(codename="review_toolcall"))
    return get_user_model().objects.get(pk=user.pk)  # fresh: permissions are cached per instance


def test_an_auto_approved_refund_succeeds_with_one_verified_ledger_row(
    celery_worker: CeleryWorker, demo_services: str, agent_api: Any
) -> None:
    api = agent_api()
    started = time.monotonic()

    response = api.propose(refund(5000, idempotency_key="refund-1"), wait=15)

    body = response.json()
    assert response.status_code == 201, body
    assert body["status"] == "succeeded", celery_worker.log()
    assert body["result"]["pedido_id"] == "PED-00000001"
    assert body["result"]["valor_centavos"] == 5000
    ledger = Refund.objects.get()
    assert body["result"]["refund_id"] == ledger.refund_id
    assert api.get(body["id"]).json() == body  # the worker's notice carried the body a read gives
    assert ledger.idempotency_key == f"gatehouse-call-{body['id']}"
    assert ledger.call_id == body["id"]
    assert ledger.approval_ref == "policy:tier-1"
    assert Order.objects.get(order_id="PED-00000001").refunded_centavos == 5000
    assert actions(body["id"]) == [
        "call.proposed",
        "call.execution_started",
        "call.executed",
        "call.succeeded",
    ]
    assert first_break() is None
    assert time.monotonic() - started < 10


def test_a_reviewer_approved_refund_runs_once_with_the_approval_in_its_credential(
    celery_worker: CeleryWorker, demo_services: str, agent_api: Any
) -> None:
    api = agent_api()
    # ?wait returns at once: the call is settled, waiting for a person.
    call_id = api.propose(refund(35000, pedido="PED-00000005", idempotency_key="refund-big"), wait=15).json()["id"]
    call = ToolCall.objects.get(pk=call_id)
    assert call.status == "pending_approval"
    assert not Refund.objects.exists()

    assert lifecycle.approve(call, reviewer())
    body = api.get(call_id, wait=15).json()

    decision = call.decisions.get()
    assert body["status"] == "succeeded"
    assert Refund.objects.get().approval_ref == f"decisions:{decision.pk}"


def test_dry_run_returns_before_and_after_and_leaves_the_downstream_unchanged(
    demo_services: str, agent_api: Any
) -> None:
    api = agent_api()

    response = api.propose(refund(35000, pedido="PED-00000005", idempotency_key="dry-1", dry_run=True))

    body = response.json()
    assert response.status_code == 200, body
    assert body["dry_run"] is True
    assert body["would_require_approval"] is True
    assert body["preview"]["before"]["refunded_centavos"] == 0
    assert body["preview"]["after"]["refunded_centavos"] == 35000
    assert "R$ 350,00" in body["preview"]["summary"]
    assert not ToolCall.objects.exists()
    assert not Refund.objects.exists()
    assert Order.objects.get(order_id="PED-00000005").refunded_centavos == 0


def test_a_verification_mismatch_needs_reconciliation_and_never_runs_again(
    celery_worker: CeleryWorker, demo_services: str, agent_api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATEHOUSE_DEMO_FAULT", "ack_without_apply:PED-00000002")
    api = agent_api()

    body = api.propose(refund(1000, pedido="PED-00000002", idempotency_key="lie"), wait=15).json()

    assert body["status"] == "needs_reconciliation"
    assert body["error"]["observed"] == {"refund": None}
    time.sleep(3)  # three sweeps later, still nobody re-runs it
    call = ToolCall.objects.get(pk=body["id"])
    assert call.status == "needs_reconciliation"
    assert call.attempts == 1
    assert actions(body["id"]).count("call.execution_started") == 1
    assert not Refund.objects.exists()


def test_a_retryable_downstream_error_is_retried_with_the_same_key(
    celery_worker: CeleryWorker, demo_services: str, agent_api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATEHOUSE_DEMO_FAULT", "unavailable_once:PED-00000003")
    api = agent_api()

    body = api.propose(refund(1000, pedido="PED-00000003", idempotency_key="flaky"), wait=15).json()

    call = ToolCall.objects.get(pk=body["id"])
    assert body["status"] == "succeeded"
    assert call.attempts == 2
    assert "call.retry_scheduled" in actions(body["id"])
    assert Refund.objects.count() == 1


def test_retries_are_bounded_then_the_call_fails(
    celery_worker: CeleryWorker, demo_services: str, agent_api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATEHOUSE_DEMO_FAULT", "unavailable:PED-00000004")
    api = agent_api()

    call_id = api.propose(refund(1000, pedido="PED-00000004", idempotency_key="down")).json()["id"]

    call = settled(call_id)
    assert call.status == "failed"
    assert call.attempts == 3  # GATEHOUSE_EXECUTION_MAX_ATTEMPTS in the worker
    assert call.error["retryable"] is True
    assert actions(call_id).count("call.retry_scheduled") == 2
    assert not Refund.objects.exists()


def test_a_permanent_downstream_error_fails_without_retry(
    celery_worker: CeleryWorker, demo_services: str, agent_api: Any
) -> None:
    api = agent_api()

    # PED-00000001 costs R$ 89,90: a R$ 150,00 refund is tier 1 but the ledger refuses it.
    body = api.propose(refund(15000, idempotency_key="too-much"), wait=15).json()

    assert body["status"] == "failed"
    assert body["error"]["downstream"]["error"] == "refund_exceeds_order"
    assert ToolCall.objects.get(pk=body["id"]).attempts == 1
    assert not Refund.objects.exists()


def test_a_duplicate_delivery_does_nothing(celery_worker: CeleryWorker, demo_services: str, agent_api: Any) -> None:
    api = agent_api()
    call_id = api.propose(refund(1000, idempotency_key="dup"), wait=15).json()["id"]
    assert ToolCall.objects.get(pk=call_id).status == "succeeded"

    sent = {"call_id": call_id, "attempts": 0, "agent": "support-agent", "tool": "emitir_estorno"}
    for _ in range(3):  # what a redelivered message looks like: the call as it was when sent
        execute_call.apply_async(kwargs=sent)
    time.sleep(2)

    call = ToolCall.objects.get(pk=call_id)
    assert call.status == "succeeded"
    assert call.attempts == 1
    assert Refund.objects.count() == 1


def test_seats_are_searched_held_and_released_through_the_worker(
    celery_worker: CeleryWorker, demo_services: str, agent_api: Any
) -> None:
    api = agent_api("box-office-agent", {"search_seats": 0, "hold_seats": 1, "release_hold": 1})
    search = {"event_id": "show-sabado", "quantity": 2, "max_price_brl": 300}

    found = api.propose({"tool": "search_seats", "arguments": search}, wait=15).json()
    seats = found["result"]["options"][0]["seat_ids"]
    held = api.propose(
        {"tool": "hold_seats", "arguments": {"event_id": "show-sabado", "seat_ids": seats}, "idempotency_key": "h-1"},
        wait=15,
    ).json()
    hold_id = held["result"]["hold_id"]
    released = api.propose(
        {"tool": "release_hold", "arguments": {"hold_id": hold_id}, "idempotency_key": "r-1"}, wait=15
    ).json()

    assert found["status"] == "succeeded"
    assert len(found["result"]["options"]) <= 5
    # A read has no effect to confirm: no second round trip; a hold is read back downstream.
    assert observed(found["id"])["detail"] == "A read: there is no effect to confirm."
    assert observed(held["id"])["observed"]["state"] == "active"
    assert held["status"] == "succeeded"
    assert released["status"] == "succeeded"
    assert released["result"]["state_before"] == "active"


def executor_context(credential: str = "forged") -> ExecutionContext:
    arguments = {"pedido_id": "PED-00000001", "valor_centavos": 100, "motivo": "atraso_entrega"}
    return ExecutionContext("emitir_estorno", arguments, "PED-00000001", "c-1", "support-agent", "k-1", credential)


def test_the_http_executor_classifies_an_unreachable_downstream_as_retryable(settings: Any) -> None:
    settings.GATEHOUSE_DEMO_SERVICES_URL = f"http://127.0.0.1:{free_port()}"

    with pytest.raises(RetryableError):
        GatehouseProtocolExecutor("/demo-services/tools/emitir_estorno").execute(executor_context())


class RecordingDownstream(BaseHTTPRequestHandler):
    """Answers every POST with `{}` and a session cookie; keeps each request's target and Cookie header."""

    protocol_version = "HTTP/1.1"  # keep-alive, as the executor's pool uses it
    seen: list[tuple[str, str | None]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).seen.append((self.path, self.headers.get("Cookie")))
        self.send_response(200)
        self.send_header("Set-Cookie", "session=from-an-earlier-call; Path=/")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def recording_downstream() -> Iterator[str]:
    RecordingDownstream.seen = []
    with http_server(RecordingDownstream) as url:
        yield url


def test_the_http_executor_sends_no_cookie_a_downstream_set_on_an_earlier_call(recording_downstream: str) -> None:
    # Each request carries its own call's credential and nothing another call was given.
    executor = GatehouseProtocolExecutor(f"{recording_downstream}/tools/search")

    executor.execute(executor_context("credential-of-call-1"))
    executor.execute(executor_context("credential-of-call-2"))

    assert [cookie for _, cookie in RecordingDownstream.seen] == [None, None]


# An execution in a process of its own: the executor reads the environment once per process, as a worker starts.
EXECUTE_IN_A_FRESH_PROCESS = """
import django
django.setup()
from toolcatalog.executors import ExecutionContext
from toolcatalog.executors.http import GatehouseProtocolExecutor
context = ExecutionContext("search_seats", {}, None, "c-1", "box-office-agent", "k-1", "credential")
GatehouseProtocolExecutor("http://downstream.invalid/tools/search").execute(context)
"""
PROXY_VARIABLES = {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}


def test_the_http_executor_goes_through_the_proxy_the_environment_names(recording_downstream: str) -> None:
    env = {name: value for name, value in os.environ.items() if name.lower() not in PROXY_VARIABLES}
    env["HTTP_PROXY"] = recording_downstream

    subprocess.run([sys.executable, "-c", EXECUTE_IN_A_FRESH_PROCESS], cwd=BASE_DIR, env=env, check=True, timeout=60)

    # The request reached the proxy, asking for the downstream by its full URL (that host does not exist).
    assert RecordingDownstream.seen == [("http://downstream.invalid/tools/search", None)]


def test_the_http_executor_classifies_a_malformed_url_as_permanent() -> None:
    # An executor reference the admin let through (it starts with http://) but no request can be sent to.
    with pytest.raises(PermanentError) as refused:
        GatehouseProtocolExecutor("http://[not-a-host/tools/search").execute(executor_context())

    assert "cannot be requested" in str(refused.value)


def test_the_http_executor_classifies_a_4xx_as_permanent(demo_services: str) -> None:
    with pytest.raises(PermanentError) as refused:
        GatehouseProtocolExecutor("/demo-services/tools/emitir_estorno").execute(executor_context())

    assert refused.value.detail["status"] == 403
    assert not Refund.objects.exists()
