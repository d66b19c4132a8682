"""approvals.store and audit.store: PostgreSQL's own statements and their portable twins give the same data.

Each test runs twice on PostgreSQL: with the store's statements, and with
`GATEHOUSE_POSTGRESQL_STORE` off (the ORM twins SQLite runs). The race over two
web processes is in test_budgets.py, likewise on both paths.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.models import Agent, BudgetCounter, BudgetScope
from approvals.models import ToolCall
from audit.chain import first_break
from audit.models import Event
from audit.sequencer import seal_all
from tests.conftest import AgentApi, refund

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(params=[True, False], ids=["postgresql-store", "portable-twin"])
def store(request: pytest.FixtureRequest, settings: Any) -> bool:
    settings.GATEHOUSE_POSTGRESQL_STORE = request.param
    settings.GATEHOUSE_AGENT_BUDGET_WINDOW_SECONDS = 2**31
    return bool(request.param)


@pytest.fixture
def support(store: bool, agent_api: Any) -> AgentApi:
    api: AgentApi = agent_api("support-agent", {"emitir_estorno": 3, "search_seats": 0})
    return api


def search(key: str) -> dict[str, Any]:
    arguments = {"event_id": "show-sabado", "quantity": 2, "max_price_brl": 300}
    return {"tool": "search_seats", "arguments": arguments, "idempotency_key": key}


def test_held_approved_replayed_and_refused_proposals_leave_the_same_rows_counters_and_events(
    support: AgentApi,
) -> None:
    held = support.propose(refund(30000, idempotency_key="held"))
    approved = support.propose(search("approved"))
    replay = support.propose(refund(30000, idempotency_key="held"))
    conflict = support.propose(refund(25000, idempotency_key="held"))
    refused = support.propose(refund(motivo="x", idempotency_key="refused"))

    statuses = [r.status_code for r in (held, approved, replay, conflict, refused)]
    assert statuses == [202, 201, 200, 409, 422]
    assert replay.json()["id"] == held.json()["id"]
    assert ToolCall.objects.filter(idempotency_key__isnull=False).count() == 2
    assert BudgetCounter.objects.get(scope=BudgetScope.WINDOW).used == 2
    seal_all()
    actions = list(Event.objects.filter(action__startswith="call.").order_by("seq").values_list("action", flat=True))
    assert actions == ["call.proposed", "call.proposed", "call.replayed", "call.refused"]
    proposed = Event.objects.filter(action="call.proposed", call_id=held.json()["id"]).get()
    assert proposed.data["arguments"]["valor_centavos"] == 30000
    assert proposed.data["status"] == "pending_approval"
    assert first_break() is None


def test_a_spent_out_conversation_budget_stores_nothing_and_spends_nothing_from_the_window(
    support: AgentApi,
) -> None:
    Agent.objects.filter(name="support-agent").update(max_calls_per_conversation=1)
    first = support.propose(refund(30000, conversation_id="c", step=0, call_index=0))
    second = support.propose(refund(30000, conversation_id="c", step=1, call_index=0))

    assert (first.status_code, second.status_code) == (202, 429)
    assert second.json()["error"] == "budget_exhausted"
    counters = dict(BudgetCounter.objects.values_list("scope", "used"))
    assert counters == {BudgetScope.WINDOW: 1, BudgetScope.CONVERSATION: 1}
    assert ToolCall.objects.filter(conversation_id="c").count() == 1
    assert first_break() is None


def test_a_spent_out_window_refuses_with_when_it_refills(support: AgentApi) -> None:
    Agent.objects.filter(name="support-agent").update(max_calls_per_window=1)
    support.propose(refund(30000, idempotency_key="one"))
    refused = support.propose(refund(30000, idempotency_key="two"))

    assert refused.status_code == 429
    assert int(refused["Retry-After"]) > 0
    assert not ToolCall.objects.filter(idempotency_key="two").exists()
    assert first_break() is None


def test_the_postgresql_store_reads_once_then_sends_insert_budget_and_append_together(
    agent_api: Any, settings: Any
) -> None:
    settings.GATEHOUSE_POSTGRESQL_STORE = True
    support = agent_api("support-agent", {"emitir_estorno": 3})
    support.propose(refund(30000, idempotency_key="first"))  # the agent is touched (last seen) once a minute
    with CaptureQueriesContext(connection) as queries:
        assert support.propose(refund(30000, idempotency_key="one-message")).status_code == 202
    statements = [q["sql"].split()[0].upper() for q in queries.captured_queries]
    # The agent and grant read; then one message: BEGIN, INSERT the call and upsert the budget (one statement,
    # WITH …), INSERT the event, COMMIT.
    assert statements == ["SELECT", "BEGIN", "WITH", "INSERT", "COMMIT"]
    assert "agents_budgetcounter" in queries.captured_queries[2]["sql"]
    assert not any("advisory" in query["sql"] for query in queries.captured_queries)  # no writer waits on a lock
    assert "token_hash" in queries.captured_queries[0]["sql"]
    assert "agents_grant" in queries.captured_queries[0]["sql"]


def test_a_spent_out_conversation_budget_fails_the_one_statement_and_spends_nothing_from_the_window(
    support: AgentApi,
) -> None:
    Agent.objects.update(max_calls_per_conversation=1)
    assert support.propose(refund(30000, conversation_id="c-one", step=0, call_index=0)).status_code == 202
    window_used = BudgetCounter.objects.get(scope=BudgetScope.WINDOW).used
    refused = support.propose(refund(30000, conversation_id="c-one", step=1, call_index=0))
    assert refused.status_code == 429
    assert refused.json()["scope"] == "conversation"
    # The window's upsert ran before the conversation's failed: rolled back with it, as is the call's INSERT.
    assert BudgetCounter.objects.get(scope=BudgetScope.WINDOW).used == window_used
    assert BudgetCounter.objects.get(scope=BudgetScope.CONVERSATION).used == 1
    assert ToolCall.objects.filter(conversation_id="c-one").count() == 1
    seal_all()
    assert first_break() is None
