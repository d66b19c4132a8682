"""The sequencer's bench measurements: a backlog inserted as writers insert events seals into a chain that verifies."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from audit.chain import first_break, record_alone
from audit.models import Event
from audit.sequencer import seal_all
from bench import sealing


@pytest.mark.django_db
def test_a_backlog_is_inserted_unsealed_and_seals_into_a_chain_that_verifies() -> None:
    record_alone("bench.before", actor=("system", "bench"))

    sealing.insert_backlog(2_000)

    assert Event.objects.filter(seq__isnull=True).count() == 2_001
    assert seal_all(batch=500) == 2_001
    assert first_break() is None


@pytest.mark.django_db
def test_the_sealing_delay_covers_the_events_created_in_the_window() -> None:
    since = datetime.now(UTC)
    for n in range(3):
        record_alone("bench.event", actor=("system", "bench"), data={"n": n})
    seal_all()

    measured = sealing.delay(since, datetime.now(UTC) + timedelta(seconds=1))

    assert measured.events == 3
    assert 0 <= measured.p50_ms <= measured.p99_ms <= measured.max_ms < 60_000


@pytest.mark.django_db
def test_the_seal_statement_ab_seals_each_backlog_whole_on_both_sides_into_a_chain_that_verifies() -> None:
    results = sealing.measure_statement(sealing.SealingResults(), runs=2, count=600, log=lambda line: None)

    assert [run.events for run in results.statement] == [600, 600]
    assert [run.events for run in results.portable] == [600, 600]
    assert Event.objects.filter(seq__isnull=True).count() == 0
    assert Event.objects.count() == 2_400
    assert first_break() is None
    assert results.statement_ratio().low > 0
    assert any("A/B: sequencer events sealed/s" in row for row in sealing.headline_rows(results, None))
