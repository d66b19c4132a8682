"""The sweeper and the attempt's phases, run in this process against a private Redis no worker reads.

Nothing here races a worker: messages the code sends stay in the private queue,
where the tests count them.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import connection
from django.utils import timezone

from approvals import execution, lifecycle
from approvals.messages import Sent
from approvals.models import ToolCall
from approvals.tasks import execute_call
from audit.chain import first_break
from audit.models import Event
from audit.sequencer import seal_all
from demo.models import Refund
from tests.conftest import refund
from tests.processes import RedisServer
from toolcatalog.executors import ExecutionContext, Executor, Verification
from toolcatalog.models import RiskTier, Tool


class UndedupedExecutor(Executor):
    """A python-kind executor whose downstream gets no idempotency key (the base class default)."""

    def execute(self, ctx: ExecutionContext) -> dict[str, Any]:
        return {"done": True}

    def dry_run(self, ctx: ExecutionContext) -> dict[str, Any]:
        return {"summary": "sends a message", "before": None, "after": None}

    def verify(self, ctx: ExecutionContext, result: dict[str, Any]) -> Verification:
        return Verification(confirmed=True, observed={})


def actions(call_id: str) -> list[str]:
    seal_all()  # in chain order: sealed, as the sequencer does within a second
    return list(Event.objects.filter(call_id=call_id).order_by("seq").values_list("action", flat=True))


def reviewer(username: str = "rita") -> Any:
    user = get_user_model().objects.create_user(username, password="x")
    user.user_permissions.add(Permission.objects.get(codename="review_toolcall"))
    return get_user_model().objects.get(pk=user.pk)


def later(seconds: float) -> Any:
    return timezone.now() + timedelta(seconds=seconds)


def deliver(call_id: str) -> None:
    """Run the execution message the sender would send for the call as it is now, in this process."""
    execute_call(call_id=call_id, **asdict(Sent.of(ToolCall.objects.select_related("agent", "tool").get(pk=call_id))))


def test_a_broker_outage_at_enqueue_is_no_5xx_and_the_sweeper_sends_the_call_later(
    sink_broker: RedisServer, demo_services: str, agent_api: Any
) -> None:
    api = agent_api()
    sink_broker.stop()

    response = api.propose(refund(1000, idempotency_key="outage"))

    assert response.status_code == 201
    assert response.json()["status"] == "approved"
    sink_broker.start()
    assert sink_broker.queue_length() == 0  # the message was lost with the broker
    assert execution.sweep()["requeued"] == 0  # within the grace period: it may still be on its way
    assert execution.sweep(now=later(6))["requeued"] == 1
    assert sink_broker.queue_length() == 1
    assert execution.sweep(now=later(7))["requeued"] == 0  # not again before a lease has passed
    assert actions(response.json()["id"]) == ["call.proposed", "call.requeued"]


def test_the_sweeper_expires_pending_calls_past_their_window(
    sink_broker: RedisServer, demo_services: str, agent_api: Any
) -> None:
    api = agent_api()
    call_id = api.propose(refund(35000, pedido="PED-00000005", idempotency_key="late")).json()["id"]
    ToolCall.objects.filter(pk=call_id).update(expires_at=timezone.now() - timedelta(seconds=1))

    assert execution.sweep()["expired"] == 1

    body = api.get(call_id).json()
    assert body["status"] == "expired"
    assert body["error"]["error"] == "expired"
    assert "call.expired" in actions(call_id)


@pytest.mark.parametrize("says_what_it_saw", [False, True], ids=["message with the id only", "message as sent"])
def test_only_one_delivery_claims_a_call(
    says_what_it_saw: bool, sink_broker: RedisServer, demo_services: str, agent_api: Any
) -> None:
    call_id = agent_api().propose(refund(1000, idempotency_key="claim")).json()["id"]
    # As sent, each delivery claims in one round trip (ToolCall.claim_as_sent); otherwise it reads, then claims.
    sent = Sent(attempts=0, agent="support-agent", tool="emitir_estorno") if says_what_it_saw else None

    def claim(_: int) -> bool:
        try:
            return execution.claim(call_id, sent) is not None
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=4) as pool:
        won = list(pool.map(claim, range(4)))

    call = ToolCall.objects.get(pk=call_id)
    assert won.count(True) == 1
    assert call.status == "executing"
    assert call.attempts == 1
    assert actions(call_id).count("call.execution_started") == 1


def test_a_step_that_loses_its_compare_and_set_writes_nothing_and_leaves_the_connection_clean(
    sink_broker: RedisServer, demo_services: str, agent_api: Any
) -> None:
    call_id = agent_api().propose(refund(1000, idempotency_key="stale")).json()["id"]
    winner, stale = (ToolCall.objects.select_related("tool", "agent").get(pk=call_id) for _ in range(2))

    assert lifecycle.claim(winner, settings.CELERY_EXECUTION_LEASE)
    assert not lifecycle.claim(stale, settings.CELERY_EXECUTION_LEASE)  # read before the winner's change

    assert connection.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert stale.status == "approved"  # the loser's instance is not changed either
    assert actions(call_id) == ["call.proposed", "call.execution_started"]
    assert first_break() is None


def test_an_expired_lease_on_an_http_tool_runs_again_with_the_same_key(
    sink_broker: RedisServer, demo_services: str, agent_api: Any
) -> None:
    call_id = agent_api().propose(refund(1000, idempotency_key="lease")).json()["id"]
    call = execution.claim(call_id)
    assert call is not None
    first_key = execution.context_for(call, "execute").idempotency_key
    queued = sink_broker.queue_length()

    swept = execution.sweep(now=later(settings.CELERY_EXECUTION_LEASE.total_seconds() + 1))

    assert swept["leases_released"] == 1
    assert swept["requeued"] == 1
    assert sink_broker.queue_length() == queued + 1
    assert ToolCall.objects.get(pk=call_id).status == "approved"
    deliver(call_id)  # the re-sent message
    call.refresh_from_db()
    assert call.status == "succeeded"
    assert call.attempts == 2
    assert Refund.objects.get().idempotency_key == first_key
    assert actions(call_id)[-5:] == [
        "call.lease_expired",
        "call.requeued",
        "call.execution_started",
        "call.executed",
        "call.succeeded",
    ]


def test_an_expired_lease_without_idempotent_delivery_needs_reconciliation(
    sink_broker: RedisServer, catalog: dict[str, Tool], agent_api: Any
) -> None:
    Tool.objects.create(
        name="send_sms",
        description="Send a text message.",
        input_schema={"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]},
        base_tier=RiskTier.objects.get(level=0),
        executor_kind="python",
        executor_ref="tests.test_sweeper.UndedupedExecutor",
    )
    call_id = (
        agent_api("notifier", {"send_sms": 0}).propose({"tool": "send_sms", "arguments": {"to": "+55"}}).json()["id"]
    )
    assert execution.claim(call_id) is not None

    swept = execution.sweep(now=later(settings.CELERY_EXECUTION_LEASE.total_seconds() + 1))

    call = ToolCall.objects.get(pk=call_id)
    assert swept["leases_released"] == 1
    assert swept["requeued"] == 0
    assert call.status == "needs_reconciliation"
    assert call.error["error"] == "needs_reconciliation"
    assert actions(call_id)[-1] == "call.lease_expired"


def test_a_tool_changed_after_approval_goes_back_for_a_fresh_approval(
    sink_broker: RedisServer, demo_services: str, agent_api: Any
) -> None:
    api = agent_api()
    call_id = api.propose(refund(35000, pedido="PED-00000005", idempotency_key="changed")).json()["id"]
    call = ToolCall.objects.get(pk=call_id)
    assert lifecycle.approve(call, reviewer())
    tool = Tool.objects.get(name="emitir_estorno")
    tool.description += " (now audited by finance)"
    tool.save()  # an admin edits the tool after the approval, before a worker runs the call

    deliver(call_id)

    call.refresh_from_db()
    assert call.status == "pending_approval"
    assert call.tool_version == tool.version
    assert call.approved_tool_version is None
    assert call.approval_count() == 0
    assert call.approvals_required == 1
    assert call.preview is None  # asked for again when a reviewer opens it
    assert "call.returned_for_approval" in actions(call_id)
    assert not Refund.objects.exists()


def test_a_tier_one_call_whose_tool_changed_still_needs_a_person(
    sink_broker: RedisServer, demo_services: str, agent_api: Any
) -> None:
    call_id = agent_api().propose(refund(1000, idempotency_key="auto-changed")).json()["id"]
    Tool.objects.get(name="emitir_estorno").bump_version()

    deliver(call_id)

    call = ToolCall.objects.get(pk=call_id)
    assert call.status == "pending_approval"
    assert call.risk_tier == 1
    assert call.approvals_required == 1
    assert not Refund.objects.exists()
