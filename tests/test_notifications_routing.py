"""Routing audit events into the outbox: which routes want what, once per channel, and what it costs a proposal."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction
from django.test.utils import CaptureQueriesContext

from agents.breakers import record_failure
from agents.models import Agent
from audit.models import Event
from audit.signals import event_recorded
from notifications import receivers
from notifications.intake import route_new_events
from notifications.models import Channel, Cursor, Delivery, EventType, Kind, Route
from notifications.receivers import COALESCE_SECONDS, on_event_recorded
from notifications.routing import Facts, wants
from tests.browser import propose_refund
from tests.conftest import AgentApi, as_database_owner
from toolcatalog.models import Tool

pytestmark = pytest.mark.django_db


def route(**fields: Any) -> Route:
    channel = Channel.objects.create(name=f"c{Channel.objects.count()}", kind=Kind.EMAIL, email_to=["o@example.com"])
    return Route.objects.create(channel=channel, **fields)


def facts(event_type: str = EventType.PENDING, tier: int | None = 2, tool: str = "t", agent: str = "a") -> Facts:
    return Facts(event_type=event_type, tier=tier, tool=tool, agent=agent)


def test_a_route_matches_by_event_tier_tool_and_agent_and_empty_lists_match_all() -> None:
    every = route(min_tier=2)
    assert wants(every, facts()) and wants(every, facts(EventType.DECIDED, tier=3))
    assert not wants(every, facts(tier=1))
    assert wants(every, facts(EventType.BREAKER_OPENED, tier=None))  # not a call's: no tier to compare
    narrow = route(min_tier=0, events=[EventType.SUCCEEDED], tools=["refund"], agents=["support"])
    assert wants(narrow, facts(EventType.SUCCEEDED, tier=0, tool="refund", agent="support"))
    assert not wants(narrow, facts(EventType.PENDING, tool="refund", agent="support"))
    assert not wants(narrow, facts(EventType.SUCCEEDED, tool="other", agent="support"))
    assert not wants(narrow, facts(EventType.SUCCEEDED, tool="refund", agent="other"))


def test_an_escalation_goes_only_to_routes_that_name_it() -> None:
    assert not wants(route(min_tier=0), facts(EventType.ESCALATED))
    assert wants(route(min_tier=0, events=[EventType.ESCALATED]), facts(EventType.ESCALATED))


def test_a_pending_proposal_is_routed_to_one_delivery_per_channel_that_wants_it(support: AgentApi) -> None:
    first = route(min_tier=2)
    Route.objects.create(channel=first.channel, min_tier=0)  # a second route to the same channel
    route(min_tier=3)  # wants tier 3 only
    call = propose_refund(support, 30000, "route-once")
    assert route_new_events() == 1
    deliveries = Delivery.objects.filter(call_id=call.pk)
    assert [(d.channel_id, d.event_type) for d in deliveries] == [(first.channel_id, EventType.PENDING)]
    assert "arguments" not in deliveries[0].payload  # rendered, masked, when sent: never stored raw
    assert route_new_events() == 0  # nothing new since


def test_events_read_again_are_stored_once(support: AgentApi) -> None:
    route(min_tier=2)
    call = propose_refund(support, 30000, "route-twice")
    route_new_events()
    Cursor.objects.update(last_seq=0)  # as if the run's commit was lost after the rows were written
    route_new_events()
    assert Delivery.objects.filter(call_id=call.pk).count() == 1


def test_the_receiver_makes_no_query_and_sends_only_for_notifiable_events(sink_broker: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(receivers, "_coalescer", receivers._Coalescer())  # no run asked for by an earlier test
    route(min_tier=3)
    pending = Event(action="call.proposed", data={"status": "pending_approval", "risk_tier": 2}, seq=1)
    claimed = Event(action="call.execution_started", data={}, seq=2)
    with CaptureQueriesContext(connection) as queries:
        on_event_recorded(Event, event=claimed)
        assert sink_broker.queue_length() == 0
        on_event_recorded(Event, event=pending)
    assert len(queries) == 0
    assert sink_broker.queue_length() == 1  # one message: a worker reads the chain itself


def test_a_burst_of_notifiable_events_asks_for_one_run_at_once_and_one_at_the_end_of_the_interval() -> None:
    coalescer = receivers._Coalescer()
    start = 1000.0

    asked = [coalescer.countdown(start + offset) for offset in (0.0, 0.1, 0.2, 0.4)]

    # The first at once; the second a run at the interval's end, which also reads the third and the fourth.
    assert asked == [0.0, pytest.approx(COALESCE_SECONDS - 0.1), None, None]
    assert coalescer.countdown(start + COALESCE_SECONDS + 0.01) == 0.0  # a new interval: at once again


def queries_of(support: AgentApi, valor: int, key: str, pedido: str, on_commit: Any) -> int:
    with CaptureQueriesContext(connection) as captured, on_commit(execute=True):
        propose_refund(support, valor, key, pedido=pedido)
    return len(captured)


def test_a_proposal_costs_no_query_more_with_notifications(
    support: AgentApi, django_capture_on_commit_callbacks: Any, sink_broker: Any
) -> None:
    route(min_tier=2)
    propose_refund(support, 10000, "cost-warm-up", pedido="PED-00000003")  # first-use rows (budgets) made
    on_commit = django_capture_on_commit_callbacks
    with_routes = [queries_of(support, valor, f"with-{valor}", "PED-00000001", on_commit) for valor in (10000, 30000)]
    event_recorded.disconnect(dispatch_uid="notifications.route_event")
    try:
        bare = [queries_of(support, valor, f"bare-{valor}", "PED-00000002", on_commit) for valor in (10000, 30000)]
    finally:
        event_recorded.connect(on_event_recorded, dispatch_uid="notifications.route_event")
    assert with_routes == bare  # auto-approved or held, the proposal reads and writes nothing more
    assert sink_broker.queue_length() >= 1  # the held one asked a worker to route it


def test_an_opened_breaker_is_routed_and_a_decision_is_routed_as_call_decided(
    support: AgentApi, console: Any, settings: Any
) -> None:
    watcher = route(min_tier=0, events=[EventType.BREAKER_OPENED, EventType.DECIDED])
    call = propose_refund(support, 30000, "route-decided")
    assert console("bob").post(f"/calls/{call.pk}/reject/", {"reason": "No."}).status_code == 302
    route_new_events()
    decided = Delivery.objects.get(channel=watcher.channel, call_id=call.pk)
    assert decided.event_type == EventType.DECIDED and decided.payload["event"]["to"] == "rejected"
    agent, tool = Agent.objects.get(name="support-agent"), Tool.objects.get(name="emitir_estorno")
    names = {"agent_name": agent.name, "tool_name": tool.name}
    with transaction.atomic():
        for _ in range(settings.GATEHOUSE_BREAKER_THRESHOLD):
            record_failure(agent_id=agent.pk, tool_id=tool.pk, kind="invalid_arguments", **names)
    route_new_events()
    opened = Delivery.objects.get(channel=watcher.channel, event_type=EventType.BREAKER_OPENED)
    assert opened.payload["agent"] == "support-agent"
    assert opened.payload["event"]["failure_kind"] == "invalid_arguments"


def test_a_routing_run_that_fails_routes_nothing_and_the_next_one_routes_it_all(support: AgentApi) -> None:
    """A real database failure (a trigger refusing every delivery row): the proposal is whole, nothing is lost."""
    route(min_tier=2)
    with as_database_owner(), connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION pg_temp.refuse() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'outbox down'; END $$"
            " LANGUAGE plpgsql"
        )
        cursor.execute(
            "CREATE TRIGGER refuse_deliveries BEFORE INSERT ON notifications_delivery"
            " FOR EACH ROW EXECUTE FUNCTION pg_temp.refuse()"
        )
    call = propose_refund(support, 30000, "outbox-down")
    assert call.status == "pending_approval"
    with pytest.raises(DatabaseError):
        route_new_events()
    assert Cursor.objects.get().last_seq == 0 and not Delivery.objects.exists()
    with as_database_owner(), connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER refuse_deliveries ON notifications_delivery")
    assert route_new_events() == 1
    assert Delivery.objects.get().call_id == call.pk
