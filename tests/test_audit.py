"""The audit log is tamper-evident: append-only in PostgreSQL, hash-chained, checkpointed."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, transaction

from audit.chain import first_break, record_alone
from audit.checkpoints import checkpoint_problems, make_checkpoint
from audit.hashing import content_digest, sealed_hash
from audit.models import ActorKind, Event
from audit.sequencer import seal_all
from tests.conftest import as_database_owner, set_truncate_trigger

# Every test here runs as the application's least-privilege database role (tests/app_role.py).
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("as_app_role")]

ACTOR = (ActorKind.SYSTEM, "test")


def write_events(count: int) -> None:
    """Record `count` events and seal them (as the sequencer would within a second)."""
    for n in range(count):
        record_alone(f"test.event{n % 3}", actor=ACTOR, data={"n": n, "text": "ação ✓", "nested": {"b": 1, "a": [1.5]}})
    seal_all()


def rehashed(event: Event) -> tuple[str, str]:
    """Return the (digest, hash) an attacker would store for `event`'s content, by its sealed form."""
    digest = content_digest(event.content_fields())
    return digest, sealed_hash(event.prev_hash, event.seq, digest)


def tamper(sql: str, params: list[object]) -> None:
    """Change stored events as an attacker with the owner's database access would: triggers off for the session."""
    with as_database_owner(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(sql, params)
        cursor.execute("SET LOCAL session_replication_role = origin")


def test_events_chain_from_genesis_and_verify() -> None:
    write_events(10)
    assert list(Event.objects.order_by("seq").values_list("seq", flat=True)) == list(range(1, 11))
    assert first_break() is None
    call_command("audit_verify")


@pytest.mark.django_db(transaction=True)
def test_record_refuses_to_run_outside_a_transaction() -> None:
    from audit.chain import record

    with pytest.raises(RuntimeError, match="inside the transaction"):
        record("x", actor=ACTOR)
    assert not Event.objects.exists()


@pytest.mark.parametrize(
    "statement",
    ["UPDATE audit_event SET action = 'x'", "DELETE FROM audit_event", "TRUNCATE audit_event"],
)
def test_postgresql_refuses_to_change_or_remove_events(statement: str) -> None:
    write_events(2)
    set_truncate_trigger(enabled=True)
    # The triggers stop even the table's owner (the app's role has not the privilege: test_db_role.py).
    with (
        as_database_owner(),
        pytest.raises(DatabaseError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(statement)
    assert Event.objects.count() == 2


def test_an_edited_event_is_named_by_audit_verify() -> None:
    write_events(5)
    tamper("UPDATE audit_event SET data = %s WHERE seq = 3", ['{"n": 999}'])
    with pytest.raises(CommandError, match="event #3: its content does not match its hash"):
        call_command("audit_verify")


def test_a_deleted_event_is_named_by_audit_verify() -> None:
    write_events(5)
    tamper("DELETE FROM audit_event WHERE seq = 2", [])
    with pytest.raises(CommandError, match="event #2 is missing"):
        call_command("audit_verify")


def test_a_rehashed_event_still_breaks_the_link_to_the_next() -> None:
    write_events(5)
    event = Event.objects.get(seq=3)
    event.data = {"n": 999}

    digest, forged = rehashed(event)
    tamper("UPDATE audit_event SET data = %s, digest = %s, hash = %s WHERE seq = 3", ['{"n": 999}', digest, forged])
    assert first_break().seq == 4


def test_signed_checkpoints_reveal_a_cut_off_tail(tmp_path) -> None:
    write_events(5)
    path = tmp_path / "checkpoints.txt"
    call_command("audit_checkpoint", out=str(path))
    call_command("audit_verify", checkpoints=str(path))
    tamper("DELETE FROM audit_event WHERE seq >= 4", [])
    assert first_break() is None  # a shortened chain verifies on its own…
    with pytest.raises(CommandError, match="log ends at #3: its tail was cut off"):
        call_command("audit_verify", checkpoints=str(path))  # …the checkpoint does not


def test_a_forged_checkpoint_is_refused() -> None:
    write_events(1)
    line = make_checkpoint()
    forged = json.loads(line)
    forged["hash"] = "f" * 64

    assert checkpoint_problems([line]) == []
    assert checkpoint_problems([json.dumps(forged)]) == [
        f"checkpoint 1 has a bad signature: its content is not what key {forged['kid']} signed"
    ]
    assert checkpoint_problems([line[:-2] + "xx"]) == [
        "checkpoint 1 is not a checkpoint (a JSON object with seq, hash, at, kid and signature)"
    ]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("sql", "params", "expected"),
    [
        (None, [], None),
        ("UPDATE audit_event SET data = %s WHERE seq = 7", ['{"n": 999}'], (7, "its content does not match its hash")),
        ("UPDATE audit_event SET data = %s WHERE seq = 2", ['{"n": 999}'], (2, "its content does not match its hash")),
        ("DELETE FROM audit_event WHERE seq = 5", [], (5, "event #5 is missing")),  # the seam of 2 × 4 events
        ("DELETE FROM audit_event WHERE seq = 1", [], (1, "event #1 is missing")),
        ("DELETE FROM audit_event WHERE seq = 8", [], None),  # a cut-off tail: checkpoints find it
        (
            "UPDATE audit_event SET prev_hash = %s WHERE seq = 5",
            ["f" * 64],
            (5, "does not chain to the event before it"),
        ),
    ],
)
def test_the_parallel_walk_names_the_same_first_break(sql: str | None, params: list[object], expected) -> None:
    from audit.chain import iter_breaks

    write_events(8)
    if sql is not None:
        with transaction.atomic():
            tamper(sql, params)
    sequential = next(iter_breaks(), None)
    parallel = first_break(workers=2, parallel_min=1)
    assert parallel == sequential
    assert (None if parallel is None else (parallel.seq, parallel.reason)) == expected
    if expected is not None:
        with pytest.raises(CommandError, match=f"event #{expected[0]}: "):
            call_command("audit_verify")


@pytest.mark.django_db(transaction=True)
def test_an_event_stamped_on_a_whole_second_verifies_in_both_walks() -> None:
    from audit.chain import iter_breaks

    write_events(4)
    last = Event.objects.get(seq=4)
    # isoformat() drops a zero fraction; the walks read created_at as text and must do the same.
    last.created_at = last.created_at.replace(microsecond=0)
    with transaction.atomic():
        tamper(
            "UPDATE audit_event SET created_at = %s, digest = %s, hash = %s WHERE seq = 4",
            [last.created_at, *rehashed(last)],
        )

    assert next(iter_breaks(), None) is None
    assert first_break(workers=2, parallel_min=1) is None


@pytest.mark.django_db(transaction=True)
def test_data_that_orjson_writes_differently_verifies_by_the_exact_form_and_an_edit_is_still_named() -> None:
    from audit.chain import iter_breaks

    # orjson refuses integers beyond 64 bits and writes 1e-07 as 1e-7; canonical_json decides both.
    for value in (2**70, 1e-07, 2**70):
        record_alone("test.odd_json", actor=ACTOR, data={"value": value})
    seal_all()

    assert next(iter_breaks(), None) is None
    assert first_break(workers=2, parallel_min=1) is None
    with transaction.atomic():
        tamper("UPDATE audit_event SET data = %s WHERE seq = 3", ['{"value": 1180591620717411303425}'])
    assert (first_break(workers=2, parallel_min=1).seq, next(iter_breaks()).seq) == (3, 3)
