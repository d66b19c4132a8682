"""The sequencer: events are inserted unsealed with no lock, and sealed once, in order, within a second.

The processes are real `manage.py audit_sequencer` processes (tests/processes.py); the
writers are threads with database connections of their own, as web processes would be.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction
from django.db.models import Max, Min

from audit import store
from audit.chain import first_break, new_event, record_alone
from audit.models import ActorKind, Event
from audit.sequencer import seal, seal_all
from tests.browser import page_text
from tests.conftest import as_database_owner
from tests.processes import Sequencer, wait_until

ACTOR = (ActorKind.SYSTEM, "test")
# Refused by the audit table's triggers, which hold even for its owner.
REFUSED = "append-only"


def write(count: int, label: str = "test.sequenced") -> None:
    for n in range(count):
        record_alone(label, actor=ACTOR, data={"n": n})


def sealed_seqs() -> list[int]:
    return list(Event.objects.filter(seq__isnull=False).order_by("seq").values_list("seq", flat=True))


def refused(statement: str, params: list[object] | None = None) -> bool:
    """Return whether the triggers refuse `statement`, run as the table's owner."""
    try:
        with as_database_owner(), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(statement, params or [])
    except DatabaseError as error:
        assert REFUSED in str(error)
        return True
    return False


@pytest.mark.django_db
def test_an_event_inserted_with_chain_values_or_without_a_digest_is_refused_by_the_trigger() -> None:
    insert = (
        "INSERT INTO audit_event (created_at, actor_kind, actor_name, action, agent_name, tool_name, data, digest,"
        " seq, prev_hash, hash, sealed_at) VALUES (now(), 'system', 'x', 'forged', '', '', '{}', %s, %s, %s, %s, %s)"
    )
    digest = "d" * 64

    assert refused(insert, [digest, 1, "0" * 64, "f" * 64, None])
    assert refused(insert, [digest, None, None, "f" * 64, None])
    assert refused(insert, [digest, None, None, None, "2026-01-01T00:00:00Z"])
    assert refused(insert, [None, None, None, None, None])
    assert not refused(insert, [digest, None, None, None, None])  # unsealed, with its digest: as every event
    assert not Event.objects.filter(action="forged", seq__isnull=False).exists()


@pytest.mark.django_db
def test_updating_a_content_column_or_sealing_again_is_refused() -> None:
    write(2)
    assert seal_all() == 2
    record_alone("test.waiting", actor=ACTOR)
    waiting = Event.objects.get(action="test.waiting")

    assert refused("UPDATE audit_event SET seq = seq + 100 WHERE seq = 1")  # sealed: set once
    assert refused("UPDATE audit_event SET sealed_at = now() WHERE seq = 2")
    assert refused("UPDATE audit_event SET action = 'edited' WHERE id = %s", [waiting.pk])  # unsealed content
    sealing = "UPDATE audit_event SET seq = 3, prev_hash = %s, hash = %s, sealed_at = now()"
    assert refused(sealing + ", data = '{\"n\": 1}' WHERE id = %s", ["a" * 64, "b" * 64, waiting.pk])
    assert refused("UPDATE audit_event SET seq = 3 WHERE id = %s", [waiting.pk])  # not all four sealing columns
    assert seal() == 1 and sealed_seqs() == [1, 2, 3]
    assert first_break() is None


@pytest.mark.django_db
def test_a_writer_takes_no_lock_and_the_sealer_chains_in_insert_order() -> None:
    with transaction.atomic():
        record_alone("test.first", actor=ACTOR)
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")
            assert cursor.fetchone() == (0,)
    write(3)
    assert Event.objects.filter(seq__isnull=True).count() == 4

    assert seal(limit=3) == 3 and seal(limit=3) == 1 and seal() == 0

    by_id = list(Event.objects.order_by("id").values_list("seq", flat=True))
    assert by_id == [1, 2, 3, 4]
    assert first_break() is None


@pytest.mark.django_db
def test_the_portable_twin_seals_a_full_batch_on_postgresql_too(settings: Any) -> None:
    settings.GATEHOUSE_POSTGRESQL_STORE = False
    with transaction.atomic():
        for n in range(8_000):  # more events than one UPDATE of bulk_update can bind parameters for
            store.append(new_event("test.sequenced", actor=ACTOR, data={"n": n}))

    assert seal(limit=10_000) == 8_000
    assert sealed_seqs() == list(range(1, 8_001))
    assert first_break() is None


def unsealed_index_reads() -> int:
    """Return how many entries of the unsealed-events index this transaction has read so far."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_get_xact_tuples_returned('audit_event_unsealed'::regclass)")
        return int(cursor.fetchone()[0])


@pytest.mark.django_db
def test_a_backlog_the_planner_statistics_do_not_know_of_is_sealed_reading_only_each_batch() -> None:
    """After an outage of the sequencer: statistics taken while none waited must not make a batch read all."""
    write(10)
    seal_all()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE audit_event")  # "no event waits", as autovacuum last saw the table
    with transaction.atomic():
        for n in range(3_000):
            store.append(new_event("test.backlog", actor=ACTOR, data={"n": n}))

    # The first batch's read also steps over the index entries of other tests' rolled-back events (once).
    assert seal(limit=100) == 100
    before = unsealed_index_reads()
    assert seal(limit=100) == 100
    # The batch's read (stepping over the first batch's entries too: their old versions are this test
    # transaction's own) and its UPDATE touch a few hundred entries, not every one of the 2,900 waiting.
    assert unsealed_index_reads() - before <= 3 * 100 + 10
    assert seal_all(batch=1_000) == 2_800 and first_break() is None


@pytest.mark.django_db(transaction=True)
def test_a_late_commit_is_sealed_after_the_events_committed_before_it() -> None:
    """An event whose transaction took a lower id but committed later gets a later seq (routing follows seq)."""
    started, go_on, done = threading.Event(), threading.Event(), threading.Event()

    def slow_writer() -> None:
        with transaction.atomic():
            record_alone("test.late", actor=ACTOR)
            started.set()
            go_on.wait(10)
        connection.close()
        done.set()

    threading.Thread(target=slow_writer).start()
    assert started.wait(10)
    record_alone("test.early", actor=ACTOR)

    assert seal_all() == 1  # the late one is not committed: not sealed, and not skipped either
    go_on.set()
    assert done.wait(10)
    assert seal_all() == 1

    late, early = (Event.objects.get(action=action) for action in ("test.late", "test.early"))
    assert late.pk < early.pk and (early.seq, late.seq) == (1, 2)
    assert first_break() is None


@pytest.mark.django_db
def test_the_audit_page_and_audit_verify_show_the_events_waiting_to_be_sealed(console: Callable[[str], Any]) -> None:
    write(2)
    seal_all()
    record_alone("test.waiting", actor=ACTOR)

    rows = page_text(console("alice").get("/audit/", htmx=True))
    out = StringIO()
    call_command("audit_verify", stdout=out)

    assert "1 event waiting to be sealed into the hash chain" in rows
    assert rows.index("test.waiting") < rows.index("test.sequenced")  # waiting events first, newest insert first
    assert rows.count(">waiting</span>") == 1
    assert "audit chain intact: 2 events" in out.getvalue() and "1 waiting to be sealed" in out.getvalue()


def write_concurrently(threads: int, each: int, pause: float = 0.0) -> None:
    """Write `threads` × `each` events from threads with connections of their own, as many web processes do."""

    def writer(index: int) -> None:
        try:
            for n in range(each):
                record_alone("test.concurrent", actor=ACTOR, data={"writer": index, "n": n})
                time.sleep(pause)
        finally:
            connection.close()

    workers = [threading.Thread(target=writer, args=(index,)) for index in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def leaders() -> int:
    """Return how many database sessions hold the sequencers' leader lock."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database"
            " WHERE l.locktype = 'advisory' AND l.granted AND d.datname = current_database()"
            " AND ((l.classid::bigint << 32) | l.objid::bigint) = %s",
            [store.LEADER_LOCK_KEY],
        )
        return int(cursor.fetchone()[0])


def all_sealed(total: int) -> bool:
    return Event.objects.filter(seq__isnull=False).count() == total


def assert_chain_whole(total: int) -> None:
    bounds = Event.objects.aggregate(low=Min("seq"), high=Max("seq"))
    assert (bounds["low"], bounds["high"]) == (1, total)
    assert not Event.objects.filter(seq__isnull=True).exists()
    out = StringIO()
    call_command("audit_verify", stdout=out)
    assert f"audit chain intact: {total} events" in out.getvalue()


@pytest.mark.django_db(transaction=True)
def test_two_sequencers_one_leads_and_events_written_by_many_threads_are_sealed_once(
    start_sequencer: Callable[..., Sequencer],
) -> None:
    first, second = start_sequencer(), start_sequencer()
    wait_until(lambda: leaders() == 1, timeout=10)

    write_concurrently(threads=8, each=40)

    wait_until(lambda: all_sealed(320), timeout=20)
    assert leaders() == 1
    assert_chain_whole(320)
    assert (first.stop(), second.stop()) == (0, 0)  # SIGTERM: both stop cleanly
    assert leaders() == 0


@transaction.atomic
def backlog(count: int) -> None:
    """Commit `count` unsealed events at once, as a burst of writers would leave them."""
    events = []
    for n in range(count):
        event = new_event("test.backlog", actor=ACTOR, data={"n": n})
        store.prepare(event)
        events.append(event)
    Event.objects.bulk_create(events, batch_size=5000)


@pytest.mark.django_db(transaction=True)
def test_the_leader_killed_mid_batch_leaves_the_rest_to_the_other_nothing_sealed_twice_or_skipped(
    start_sequencer: Callable[..., Sequencer],
) -> None:
    total = 60_000
    leader = start_sequencer(batch=200)
    wait_until(lambda: leaders() == 1, timeout=10)
    standby = start_sequencer(batch=200)  # started after the leader leads: it waits
    backlog(total)
    wait_until(lambda: Event.objects.filter(seq__isnull=False).exists(), timeout=20, interval=0.01)

    leader.kill()  # in the middle of its batches: the batch it had open is rolled back whole
    sealed_when_killed = Event.objects.filter(seq__isnull=False).count()

    assert 0 < sealed_when_killed < total
    wait_until(lambda: all_sealed(total), timeout=60)
    assert leaders() == 1  # the standby took over
    assert_chain_whole(total)
    assert standby.stop() == 0


@pytest.mark.django_db(transaction=True)
def test_events_written_while_a_sequencer_runs_are_sealed_within_one_second(
    start_sequencer: Callable[..., Sequencer],
) -> None:
    """docs/reliability.md: an event waits at most 1 s (created_at → sealed_at) while a sequencer runs."""
    start_sequencer()
    wait_until(lambda: leaders() == 1, timeout=10)

    write_concurrently(threads=4, each=60, pause=0.01)
    wait_until(lambda: all_sealed(240), timeout=10)

    delays = [sealed - created for created, sealed in Event.objects.values_list("created_at", "sealed_at")]
    assert max(delays) < timedelta(seconds=1), max(delays)
    assert_chain_whole(240)
