"""Claiming an approved call from what its execution message says of it.

The proposal's message waits in a private Redis no worker reads; each test
delivers it (or claims from it) in this process.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import psycopg
import pytest
import redis
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.models import Agent
from approvals import execution, lifecycle
from approvals.messages import Sent
from approvals.models import ToolCall
from approvals.tasks import execute_call
from audit.chain import first_break
from audit.models import Event
from audit.sequencer import seal_all
from tests.conftest import refund
from tests.processes import RedisServer


def queued_kwargs(broker: RedisServer) -> list[dict[str, Any]]:
    """Return the keyword arguments of every execution message waiting on `broker`, oldest first."""
    messages = redis.Redis.from_url(broker.url).lrange("celery", 0, -1)
    bodies = [json.loads(base64.b64decode(json.loads(message)["body"])) for message in reversed(messages)]
    return [kwargs for _args, kwargs, _embed in bodies]


@pytest.fixture
def proposed(sink_broker: RedisServer, demo_services: str, agent_api: Any) -> tuple[str, Sent]:
    """Return an auto-approved refund whose message waits undelivered, and what that message says of it."""
    call_id = agent_api().propose(refund(1000, idempotency_key="k")).json()["id"]
    return call_id, Sent(attempts=0, agent="support-agent", tool="emitir_estorno")


def started_events(call_id: str) -> list[Event]:
    seal_all()  # in chain order: sealed, as the sequencer does within a second
    return list(Event.objects.filter(call_id=call_id, action="call.execution_started").order_by("seq"))


def test_an_execution_message_says_what_the_call_was_when_sent(
    sink_broker: RedisServer, demo_services: str, agent_api: Any
) -> None:
    call_id = agent_api().propose(refund(1000, idempotency_key="k")).json()["id"]

    assert queued_kwargs(sink_broker) == [
        {"call_id": call_id, "attempts": 0, "agent": "support-agent", "tool": "emitir_estorno"}
    ]


def test_a_call_as_sent_is_claimed_without_reading_it_first(
    sink_broker: RedisServer, demo_services: str, agent_api: Any
) -> None:
    call_id = agent_api().propose(refund(1000, idempotency_key="k")).json()["id"]
    sent = Sent(**{k: v for k, v in queued_kwargs(sink_broker)[0].items() if k != "call_id"})

    with CaptureQueriesContext(connection) as queries:
        call = execution.claim(call_id, sent)

    statements = [query["sql"] for query in queries if query["sql"] not in ("BEGIN", "COMMIT")]
    assert statements[0].startswith('UPDATE "approvals_toolcall"')  # the claim comes first: nothing read before it
    assert call is not None
    assert (call.status, call.attempts) == ("executing", 1)
    assert (call.agent.name, call.tool.name) == ("support-agent", "emitir_estorno")
    assert call.lease_expires_at is not None
    assert ToolCall.objects.get(pk=call_id).status == "executing"
    [event] = started_events(call_id)
    assert (event.agent_name, event.tool_name, event.actor_name) == ("support-agent", "emitir_estorno", "worker")
    assert event.data == {
        "from": "approved",
        "to": "executing",
        "attempt": 1,
        "lease_expires_at": call.lease_expires_at.isoformat(),
    }
    assert first_break() is None


def test_a_second_delivery_of_the_message_claims_nothing(proposed: tuple[str, Sent]) -> None:
    call_id, sent = proposed
    assert execution.claim(call_id, sent) is not None

    assert execution.claim(call_id, sent) is None
    assert lifecycle.claim_as_sent(call_id, sent, settings.CELERY_EXECUTION_LEASE) is None

    assert connection.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert len(started_events(call_id)) == 1
    assert ToolCall.objects.get(pk=call_id).attempts == 1
    assert first_break() is None


def test_a_call_no_longer_as_sent_is_read_and_claimed_as_it_is(proposed: tuple[str, Sent]) -> None:
    call_id, sent = proposed
    Agent.objects.filter(name="support-agent").update(name="renamed-agent")  # after the message was sent

    assert lifecycle.claim_as_sent(call_id, sent, settings.CELERY_EXECUTION_LEASE) is None
    call = execution.claim(call_id, sent)

    assert call is not None
    assert call.status == "executing"
    [event] = started_events(call_id)
    assert event.agent_name == "renamed-agent"  # the event names the agent as it is
    assert first_break() is None


def test_the_delivered_message_runs_the_call_to_the_end(
    sink_broker: RedisServer, demo_services: str, agent_api: Any
) -> None:
    call_id = agent_api().propose(refund(1000, idempotency_key="k")).json()["id"]
    execute_call(**queued_kwargs(sink_broker)[0])

    call = ToolCall.objects.get(pk=call_id)
    assert (call.status, call.attempts) == ("succeeded", 1)
    seal_all()
    assert list(Event.objects.filter(call_id=call_id).order_by("seq").values_list("action", flat=True)) == [
        "call.proposed",
        "call.execution_started",
        "call.executed",
        "call.succeeded",
    ]
    assert first_break() is None
