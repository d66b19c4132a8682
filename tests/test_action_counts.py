"""The chain's events by action: folded now and then, read as the folds plus the events since, each counted once."""

from __future__ import annotations

from collections import Counter

import pytest
from django.db import connection

from approvals import execution
from audit import counts
from audit.chain import record_alone
from audit.models import ActionCounts, Event
from audit.sequencer import seal_all

pytestmark = pytest.mark.django_db

ACTIONS = ("call.succeeded", "call.failed", "circuit.opened")


def record(*actions: str) -> None:
    for action in actions:
        record_alone(action, actor=("system", "gatehouse"))


def live() -> Counter[str]:
    return Counter(Event.objects.filter(action__in=ACTIONS).values_list("action", flat=True))


def test_every_event_is_counted_once_sealed_or_waiting_before_and_after_each_fold() -> None:
    record("call.succeeded", "call.succeeded", "call.failed", "call.proposed")
    assert counts.events_by_action(ACTIONS) == live()  # none folded, none sealed

    seal_all()
    assert counts.fold() == 4
    record("call.succeeded", "circuit.opened")  # waiting to be sealed
    assert (
        counts.events_by_action(ACTIONS)
        == live()
        == Counter({"call.succeeded": 3, "call.failed": 1, "circuit.opened": 1})
    )

    seal_all()
    record("call.failed")
    assert counts.events_by_action(ACTIONS) == live()
    assert counts.fold() == 2
    assert counts.events_by_action(ACTIONS) == live()
    assert "call.proposed" not in counts.events_by_action(ACTIONS)


def test_a_long_unfolded_stretch_is_folded_in_steps_and_only_the_newest_two_folds_stay() -> None:
    record(*["call.succeeded"] * 7)
    seal_all()

    steps = []
    while folded := counts.fold(span=3):
        steps.append(folded)

    assert steps == [3, 3, 1]
    assert counts.fold() == 0  # nothing new
    head = Event.objects.order_by("-seq").values_list("seq", flat=True).first()
    assert list(ActionCounts.objects.order_by("through_seq").values_list("through_seq", flat=True)) == [head - 1, head]
    assert counts.events_by_action(ACTIONS) == live() == Counter({"call.succeeded": 7})


def test_two_folds_of_the_same_head_leave_one_row() -> None:
    record("call.succeeded")
    seal_all()
    through, _ = counts.newest()

    assert counts.fold() == 1
    # A second sweeper that read the same newest fold writes the same row: it is ignored.
    ActionCounts.objects.filter(through_seq__gt=through).delete()
    assert counts.fold() == 1
    assert counts.fold() == 0
    assert ActionCounts.objects.filter(through_seq__gt=through).count() == 1


def test_a_read_after_a_fold_reads_only_the_events_since_not_the_chain() -> None:
    record(*["call.succeeded"] * 300)
    seal_all()
    counts.fold()
    record("call.failed", "call.succeeded")

    # The planner's statistics, as autovacuum keeps them; and a table this small would be read
    # whole whatever the query: the planner is told to use the indexes, as it chooses to by
    # itself at a year's events (bench/findings.md, 30).
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE audit_event")
        cursor.execute("SET LOCAL enable_seqscan = off")
    before = rows_read_from_events()
    counted = counts.events_by_action(ACTIONS)
    read = rows_read_from_events() - before

    assert counted == live()
    assert read < 50, read  # the two events since the fold (and index entries around them), not the 300 folded


def test_the_sweeper_folds_the_counts() -> None:
    record("call.succeeded", "call.failed")
    seal_all()

    assert execution.sweep()["audit_events_counted"] == 2
    assert counts.newest()[1] == {"call.succeeded": 1, "call.failed": 1}


def rows_read_from_events() -> int:
    """Rows this transaction fetched from audit_event, by index or by scan (PostgreSQL's own counters)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_stat_get_xact_tuples_fetched(%s::regclass) + pg_stat_get_xact_tuples_returned(%s::regclass)",
            ["audit_event", "audit_event"],
        )
        return int(cursor.fetchone()[0])
