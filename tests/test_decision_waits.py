"""How long decided calls waited: folded now and then, read as the folds plus the decisions since, each once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from approvals import decision_waits, execution, lifecycle
from approvals.decision_waits import Waits
from approvals.models import DecisionWaits, ToolCall
from audit.models import Event
from audit.sequencer import seal_all
from tests.conftest import refund

pytestmark = pytest.mark.django_db


def reviewer() -> Any:
    user = get_user_model().objects.create_user("rita", password="x")
    user.user_permissions.add(Permission.objects.get(codename="review_toolcall"))
    return get_user_model().objects.get(pk=user.pk)  # fresh: permissions are cached per instance


def held(agent_api: Any, key: str, waited: timedelta) -> ToolCall:
    """Return a call held for a reviewer, proposed `waited` ago."""
    response = agent_api("support-agent").propose(refund(35000, idempotency_key=key))
    assert response.status_code == 202, response.content
    calls = ToolCall.objects.filter(pk=response.json()["id"])
    calls.update(created_at=calls.get().created_at - waited)
    return calls.get()


def counts(**by_bound: int) -> tuple[int, ...]:
    """Return a histogram's counts: decisions by the bucket (its bound in seconds, `inf` above all) they fall in."""
    names = [*(f"s{int(bound)}" for bound in decision_waits.BUCKETS), "inf"]
    return tuple(by_bound.get(name, 0) for name in names)


def test_every_decision_is_observed_once_sealed_or_waiting_before_and_after_each_fold(agent_api: Any) -> None:
    rita = reviewer()
    quick, slow, late = (
        held(agent_api, key, waited)
        for key, waited in (("quick", timedelta(0)), ("slow", timedelta(minutes=10)), ("late", timedelta(days=2)))
    )
    assert decision_waits.waits() == Waits()

    assert lifecycle.approve(quick, rita)
    assert lifecycle.reject(slow, rita, "not this order")
    assert decision_waits.waits().counts == counts(s60=1, s900=1)  # both still waiting to be sealed

    seal_all()
    assert decision_waits.fold() == 2
    assert lifecycle.approve(late, rita)
    observed = decision_waits.waits()
    assert observed.counts == counts(s60=1, s900=1, inf=1)
    assert 2 * 86400 + 600 <= observed.seconds < 2 * 86400 + 600 + 60
    cumulative = [("60.0", 1), ("300.0", 1), ("900.0", 2), ("3600.0", 2), ("14400.0", 2), ("86400.0", 2)]
    assert observed.cumulative() == [*cumulative, ("+Inf", 3)]

    seal_all()
    assert decision_waits.fold() == 1
    assert decision_waits.fold() == 0
    assert decision_waits.waits() == observed


def test_a_fold_observes_only_reviewers_decisions(agent_api: Any) -> None:
    response = agent_api("box-office-agent", {"search_seats": 0}).propose(
        {"tool": "search_seats", "arguments": {"event_id": "show-sabado", "quantity": 2, "max_price_brl": 300}}
    )
    assert response.json()["status"] == "approved"  # approved by its tier: no one decided
    seal_all()

    assert decision_waits.fold() == 0
    assert decision_waits.waits() == Waits()


def test_a_long_unfolded_stretch_is_folded_in_steps_and_only_the_newest_two_folds_stay(agent_api: Any) -> None:
    rita = reviewer()
    for n in range(3):
        assert lifecycle.approve(held(agent_api, f"call-{n}", timedelta(minutes=2)), rita)
    seal_all()
    first_decision = min(Event.objects.filter(action="call.approved").values_list("seq", flat=True))

    steps = []
    while folded := decision_waits.fold(span=first_decision):
        steps.append(folded)

    assert sum(steps) == 3 and len(steps) > 1
    assert DecisionWaits.objects.count() == 2
    assert decision_waits.waits().counts == counts(s300=3)


def test_a_scrape_after_a_fold_reads_only_the_decisions_since(agent_api: Any) -> None:
    rita = reviewer()
    for n in range(30):
        assert lifecycle.approve(held(agent_api, f"call-{n}", timedelta(seconds=5)), rita)
    seal_all()
    decision_waits.fold()
    assert lifecycle.approve(held(agent_api, "since", timedelta(hours=2)), rita)

    # As autovacuum keeps them, and with the indexes the planner takes by itself at a year's events.
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE audit_event")
        cursor.execute("ANALYZE approvals_toolcall")
        cursor.execute("SET LOCAL enable_seqscan = off")
    before = rows_read("approvals_toolcall")
    observed = decision_waits.waits()
    read = rows_read("approvals_toolcall") - before

    assert observed.counts == counts(s60=30, s14400=1)
    assert read <= 2, read  # the one call decided since the fold, not the 30 folded


def test_the_sweeper_folds_the_decision_waits(agent_api: Any) -> None:
    assert lifecycle.approve(held(agent_api, "swept", timedelta(minutes=30)), reviewer())
    seal_all()

    assert execution.sweep()["decisions_folded"] == 1
    assert decision_waits.newest()[1].counts == counts(s3600=1)


def test_the_upgrade_folds_the_decisions_already_recorded(agent_api: Any) -> None:
    rita = reviewer()
    assert lifecycle.approve(held(agent_api, "before", timedelta(hours=3)), rita)
    assert lifecycle.reject(held(agent_api, "rejected", timedelta(seconds=1)), rita, "no")
    seal_all()
    migrate_approvals_to("0012_tally_on_postgresql_only")

    migrate_approvals_to("0013_decision_waits")

    through, folded = decision_waits.newest()
    assert through == Event.objects.order_by("-seq").values_list("seq", flat=True).first()
    assert folded.counts == counts(s60=1, s14400=1)


def migrate_approvals_to(target: str) -> None:
    MigrationExecutor(connection).migrate([("approvals", target)])


def rows_read(table: str) -> int:
    """Rows this transaction fetched from `table`, by index or by scan (PostgreSQL's own counters)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_stat_get_xact_tuples_fetched(%s::regclass) + pg_stat_get_xact_tuples_returned(%s::regclass)",
            [table, table],
        )
        return int(cursor.fetchone()[0])
