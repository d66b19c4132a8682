"""Calls to upstream MCP tools end to end: the agent API, a real Celery worker, real upstream processes.

Both transports: over stdio the worker starts the upstream command itself for each
attempt; over Streamable HTTP the upstream is a server process of its own. The
upstream writes every tools/call it receives to a file, so "exactly once" is counted
where it matters.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from agents.models import Grant
from agents.provisioning import create_or_update_agent
from approvals import execution, lifecycle
from approvals.models import ToolCall
from approvals.tasks import execute_call
from audit.models import Event
from tests.browser import Console
from tests.conftest import AgentApi
from tests.processes import CeleryWorker, wait_until
from tests.upstream_peers import CANCEL, HOLD, SEARCH, Peer
from toolcatalog.models import Tool
from toolcatalog.policies import policy_for
from toolcatalog.policy import evaluate
from toolcatalog.upstreams_sync import sync

pytestmark = pytest.mark.worker

TERMINAL = {"succeeded", "failed", "needs_reconciliation", "refused", "rejected", "expired"}
GRANTS = {"box_search_seats": 3, "box_hold_seats": 3, "box_cancel_order": 3}


def settled(call_id: str, timeout: float = 30) -> ToolCall:
    return wait_until(lambda: ToolCall.objects.filter(pk=call_id, status__in=TERMINAL).first(), timeout=timeout)


def synced_agent(peer: Peer, *tools: dict[str, Any], behaviours: dict[str, str] | None = None) -> AgentApi:
    """Offer `tools` on the peer, register and sync it as `box`, and return an agent granted them (owned by admin)."""
    peer.offer(*tools, behaviours=behaviours)
    sync(peer.register("box"))
    grants = {name: tier for name, tier in GRANTS.items() if Tool.objects.filter(name=name).exists()}
    _, token = create_or_update_agent("box-agent", grants, owner_username="admin")
    return AgentApi(Client(), token)


def propose(api: AgentApi, tool: str, arguments: dict[str, Any], key: str, wait: float | None = None) -> dict[str, Any]:
    response = api.propose({"tool": tool, "arguments": arguments, "idempotency_key": key}, wait=wait)
    assert response.status_code in (201, 202), response.content
    return response.json()


def test_a_read_only_tool_runs_on_its_own_and_keeps_the_upstream_answer(
    celery_worker: CeleryWorker, peer: Peer, people: dict[str, User]
) -> None:
    api = synced_agent(peer, SEARCH, HOLD)

    body = propose(api, "box_search_seats", {"event_id": "EV-1", "quantity": 2}, "read-1", wait=20)

    assert body["status"] == "succeeded", celery_worker.log()
    assert body["risk_tier"] == 0
    result = body["result"]
    assert result["isError"] is False
    assert result["structuredContent"]["arguments"] == {"event_id": "EV-1", "quantity": 2}
    assert result["content"][0]["type"] == "text"
    assert peer.calls() == [{"name": "search_seats", "arguments": {"event_id": "EV-1", "quantity": 2}}]


def test_a_destructive_tool_waits_and_once_approved_reaches_the_upstream_exactly_once(
    celery_worker: CeleryWorker, peer: Peer, people: dict[str, User]
) -> None:
    api = synced_agent(peer, SEARCH, CANCEL)
    body = propose(api, "box_cancel_order", {"order_id": "OR-7"}, "cancel-1")
    assert body["status"] == "pending_approval" and body["risk_tier"] == 2
    assert peer.calls() == []
    call = ToolCall.objects.get(pk=body["id"])

    Console(people["alice"]).approve(call)
    Console(people["bob"]).approve(call)  # a second click changes nothing

    done = settled(body["id"])
    assert done.status == "succeeded", celery_worker.log()
    assert peer.calls() == [{"name": "cancel_order", "arguments": {"order_id": "OR-7"}}]
    assert api.get(body["id"]).json()["result"]["structuredContent"]["arguments"] == {"order_id": "OR-7"}


def test_an_edited_call_reaches_the_upstream_with_the_edited_arguments(
    celery_worker: CeleryWorker, peer: Peer, people: dict[str, User]
) -> None:
    api = synced_agent(peer, CANCEL)
    body = propose(api, "box_cancel_order", {"order_id": "OR-1"}, "edit-1")
    call = ToolCall.objects.select_related("tool", "agent").get(pk=body["id"])
    grant = Grant.objects.get(agent=call.agent, tool=call.tool)
    edited = {"order_id": "OR-2"}

    lifecycle.edit_arguments(call, people["alice"], edited, evaluate(policy_for(call.tool), grant, edited))
    Console(people["bob"]).approve(call)

    assert settled(body["id"]).status == "succeeded", celery_worker.log()
    assert peer.calls() == [{"name": "cancel_order", "arguments": {"order_id": "OR-2"}}]


def test_an_upstream_is_error_fails_the_call_with_its_message(
    celery_worker: CeleryWorker, peer: Peer, people: dict[str, User]
) -> None:
    api = synced_agent(peer, HOLD, behaviours={"hold_seats": "error"})

    body = propose(api, "box_hold_seats", {"event_id": "EV-1", "seat_ids": ["A1"]}, "hold-1", wait=20)

    assert body["status"] == "failed", celery_worker.log()
    assert "no longer available" in body["error"]["message"]
    assert body["error"]["downstream"]["isError"] is True
    assert len(peer.calls("hold_seats")) == 1  # a permanent failure: never sent again


def test_an_upstream_killed_mid_call_needs_reconciliation_and_is_not_sent_twice(
    celery_worker: CeleryWorker, peer: Peer, people: dict[str, User]
) -> None:
    api = synced_agent(peer, HOLD, behaviours={"hold_seats": "die"})

    body = propose(api, "box_hold_seats", {"event_id": "EV-1", "seat_ids": ["A1"]}, "hold-die")

    done = settled(body["id"])
    assert done.status == "needs_reconciliation", celery_worker.log()
    assert "no idempotency key" in done.error["detail"]
    execution.sweep()  # nothing takes it up again
    assert len(peer.calls("hold_seats")) == 1


def test_a_worker_killed_mid_call_leaves_a_write_for_a_person_and_a_read_to_retry(
    peer: Peer, people: dict[str, User], sink_broker: Any
) -> None:
    api = synced_agent(peer, SEARCH, HOLD)
    write = propose(api, "box_hold_seats", {"event_id": "EV-1", "seat_ids": ["A1"]}, "hold-lease")
    read = propose(api, "box_search_seats", {"event_id": "EV-1"}, "read-lease")
    for body in (write, read):  # claimed, then the worker vanished: its lease runs out
        call = ToolCall.objects.get(pk=body["id"])
        assert lifecycle.claim(call, lease=timedelta(seconds=0))

    execution.release_expired_leases(timezone.now())

    assert ToolCall.objects.get(pk=write["id"]).status == "needs_reconciliation"
    assert ToolCall.objects.get(pk=read["id"]).status == "approved"  # read-only: safe to send again


def test_a_schema_change_sends_an_approved_call_back_for_approval(
    http_peer: Peer, people: dict[str, User], sink_broker: Any
) -> None:
    api = synced_agent(http_peer, CANCEL)
    body = propose(api, "box_cancel_order", {"order_id": "OR-3"}, "cancel-schema")
    call = ToolCall.objects.get(pk=body["id"])
    Console(people["alice"]).approve(call)  # approved; its message waits in a broker no worker reads
    assert ToolCall.objects.get(pk=call.pk).status == "approved"

    changed = {
        **CANCEL,
        "inputSchema": {
            **CANCEL["inputSchema"],
            "properties": {"order_id": {"type": "string"}, "refund": {"type": "boolean"}},
        },
    }
    http_peer.offer(changed)
    report = sync(call.tool.upstream_link.upstream)
    assert report.changed == ["box_cancel_order"]

    call.refresh_from_db()
    execute_call(call_id=str(call.pk), attempts=call.attempts, agent=call.agent.name, tool=call.tool.name)

    call.refresh_from_db()
    assert call.status == "pending_approval"
    assert Event.objects.filter(call_id=call.pk, action="call.returned_for_approval").exists()
    assert http_peer.calls() == []


def test_a_tool_removed_upstream_is_disabled_unlisted_and_its_calls_stay_readable(
    celery_worker: CeleryWorker, http_peer: Peer, people: dict[str, User]
) -> None:
    api = synced_agent(http_peer, SEARCH, HOLD)
    body = propose(api, "box_search_seats", {"event_id": "EV-9"}, "read-before", wait=20)
    assert body["status"] == "succeeded", celery_worker.log()

    http_peer.offer(HOLD)
    sync(Tool.objects.get(name="box_search_seats").upstream_link.upstream)

    assert [t["name"] for t in api.tools().json()["tools"]] == ["box_hold_seats"]
    assert api.get(body["id"]).json()["status"] == "succeeded"
    assert Tool.objects.filter(name="box_search_seats", enabled=False).exists()
    refused = api.propose({"tool": "box_search_seats", "arguments": {"event_id": "EV-9"}})
    assert refused.json()["error"] == "unknown_or_not_permitted_tool"


def test_a_write_left_unanswered_needs_reconciliation_and_a_read_is_retried(
    peer: Peer, people: dict[str, User], sink_broker: Any, settings: Any, transactional_db: None
) -> None:
    settings.GATEHOUSE_UPSTREAM_TIMEOUT_SECONDS = 2
    slow_search = {**SEARCH, "name": "search_seats"}
    api = synced_agent(peer, slow_search, HOLD, behaviours={"hold_seats": "hang", "search_seats": "hang"})
    write = propose(api, "box_hold_seats", {"event_id": "EV-1", "seat_ids": ["A1"]}, "hold-hang")
    read = propose(api, "box_search_seats", {"event_id": "EV-1"}, "read-hang")

    for body in (write, read):  # the worker's task, run here: its messages wait in a broker no worker reads
        call = ToolCall.objects.select_related("agent", "tool").get(pk=body["id"])
        execute_call(call_id=str(call.pk), attempts=call.attempts, agent=call.agent.name, tool=call.tool.name)

    held = ToolCall.objects.get(pk=write["id"])
    assert held.status == "needs_reconciliation"
    assert "did not answer in time" in held.error["detail"]
    retried = ToolCall.objects.get(pk=read["id"])
    assert retried.status == "approved" and retried.error["retryable"] is True
    assert len(peer.calls("hold_seats")) == 1
