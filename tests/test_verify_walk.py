"""The walk rebuilds created_at's hashed text from PostgreSQL's plain text: exactly, for every timestamp."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from audit.chain import ChainBreak, _breaks, _stamp, first_break, iter_breaks, record_alone
from audit.hashing import CREATED_TEXT_SQL, GENESIS_HASH, content_digest, sealed_hash
from audit.models import ActorKind, Event
from audit.sequencer import seal_all
from tests.test_audit import tamper

pytestmark = pytest.mark.django_db

ACTOR = (ActorKind.SYSTEM, "test")

# Timestamps whose text takes each branch: a zero fraction, trailing zeros, before 1970, the first and last
# microseconds Python's datetime holds, a leap day.
ODD_STAMPS = [
    "2026-12-04 15:05:54+00",
    "2026-12-04 15:05:54.5+00",
    "2026-12-04 15:05:54.000001+00",
    "2026-12-04 15:05:54.120000+00",
    "1969-12-31 23:59:59.999999+00",
    "1900-01-01 00:00:00+00",
    "0001-01-01 00:00:00+00",
    "0999-06-01 12:00:00.25+00",
    "9999-12-31 23:59:59.999999+00",
    "2024-02-29 23:59:59.99999+00",
]
# (data as stored, its text as jsonb gives it back): escapes, unicode, nesting, floats orjson writes otherwise.
ODD_DATA = [
    '{"é": "\\u0001\\n\\"\\\\", "a": {"z": [1.5, -0.5, 100], "b": null}, "ü✓": true}',
    '{"value": 1e-07, "big": 1180591620717411303425, "neg": -0.0}',
    '{"b": "\\u2028", "a": "😀", "": []}',
]


def sealed_rows(stamps: list[str], data_texts: list[str]) -> list[tuple[object, ...]]:
    """Return walk rows (the walker's columns) for events stamped `stamps`, sealed over CREATED_TEXT_SQL's text.

    Each row's created_at is PostgreSQL's plain text of the stamp (what the walker
    reads); its digest covers the text the hash definition names.
    """
    expression = CREATED_TEXT_SQL.format("v")
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT set_config('TimeZone', 'UTC', true), set_config('DateStyle', 'ISO', true)")
        cursor.execute(
            f"SELECT v::text, {expression}, d::jsonb::text FROM unnest(%s::timestamptz[], %s::text[]) AS t(v, d)",  # noqa: S608
            [stamps, [data_texts[n % len(data_texts)] for n in range(len(stamps))]],
        )
        texts = cursor.fetchall()
    rows, prev = [], GENESIS_HASH
    for seq, (plain, hashed, data) in enumerate(texts, start=1):
        columns = (seq, hashed, "system", "test", "test.odd", f"00000000-0000-0000-0000-{seq:012x}", "", "")
        fields = Event.fields_to_hash(*columns, json.loads(data))
        del fields["seq"]
        digest = content_digest(fields)
        hashed_seal = sealed_hash(prev, seq, digest)
        rows.append((plain, data, seq, "system", "test", "test.odd", columns[5], "", "", digest, prev, hashed_seal))
        prev = hashed_seal
    return rows


def test_stamp_reads_created_at_text_of_any_offset_or_form_as_the_utc_isoformat() -> None:
    assert _stamp("2026-12-04 17:05:54.5+02", "") == "2026-12-04T15:05:54.500000+00:00"
    assert _stamp("2026-12-04 15:05:54.0984+00", "2026-12-04T15:05:54") == "2026-12-04T15:05:54.098400+00:00"
    assert _stamp("2026-12-04 15:05:54+00", "2026-12-04T15:05:54") == "2026-12-04T15:05:54+00:00"
    assert _stamp("2026-12-04T15:05:54.098403+00:00", "") == "2026-12-04T15:05:54.098403+00:00"
    # No datetime is these: kept as they are, they equal no isoformat() and so no hashed text.
    for text in ("0044-03-15 12:00:00+00 BC", "10000-01-01 00:00:00+00", "infinity", "2026-12-04 15:05:54"):
        assert _stamp(text, "") == text


def test_the_walk_rebuilds_exactly_the_hashed_text_of_odd_and_random_timestamps() -> None:
    with connection.cursor() as cursor:  # random instants from year 1 to 9999, a quarter of them on whole seconds
        cursor.execute(
            "SELECT (timestamptz '0001-01-01 00:00:00+00' + random() * interval '9998 years')::text"
            " FROM generate_series(1, 4000)"
        )
        randoms = [row[0] for row in cursor.fetchall()]
    stamps = ODD_STAMPS + randoms + [text[:19] + "+00" for text in randoms[:1000]]
    rows = sealed_rows(stamps, [*ODD_DATA, '{"n": 1}'])

    assert list(_breaks(iter(rows), 1, GENESIS_HASH, [])) == []


@pytest.mark.parametrize("data_text", ODD_DATA)
def test_an_edit_of_odd_data_or_of_a_stamp_by_a_microsecond_is_named(data_text: str) -> None:
    rows = sealed_rows(ODD_STAMPS, [data_text])
    edited = list(rows)
    edited[3] = (rows[3][0], data_text.replace("1", "2").replace("a", "c"), *rows[3][2:])
    edited[5] = ("1900-01-01 00:00:00.000001+00", *rows[5][1:])

    assert [(found.seq, found.reason) for found in _breaks(iter(edited), 1, GENESIS_HASH, [])] == [
        (4, "its content does not match its hash"),
        (6, "its content does not match its hash"),
    ]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("stamp", ["10000-01-01 00:00:00+00", "0044-03-15 12:00:00+00 BC", "infinity"])
def test_a_timestamp_no_datetime_holds_is_named_by_both_walks(stamp: str) -> None:
    for n in range(4):
        record_alone("test.event", actor=ACTOR, data={"n": n})
    seal_all()
    with transaction.atomic():
        tamper("UPDATE audit_event SET created_at = %s WHERE seq = 3", [stamp])

    assert next(iter_breaks()).seq == 3
    assert first_break(workers=2, parallel_min=1).seq == 3


@pytest.mark.django_db(transaction=True)
def test_events_stamped_before_1970_and_on_whole_seconds_verify_in_both_walks() -> None:
    for n in range(6):
        record_alone("test.event", actor=ACTOR, data={"n": n, "text": "ação ✓"})
    seal_all()
    moments = [datetime(1969, 7, 20, 20, 17, 40, tzinfo=UTC), datetime(1901, 1, 1, 0, 0, 0, 120, tzinfo=UTC)]
    with transaction.atomic():
        for seq, moment in zip((2, 5), moments, strict=True):
            tamper("UPDATE audit_event SET created_at = %s WHERE seq = %s", [moment, seq])
        prev = GENESIS_HASH
        for event in Event.objects.order_by("seq"):  # rechained as an attacker with the owner's access would
            digest = content_digest(event.content_fields())
            event.prev_hash, event.digest, event.hash = prev, digest, sealed_hash(prev, event.seq, digest)
            tamper(
                "UPDATE audit_event SET prev_hash = %s, digest = %s, hash = %s WHERE seq = %s",
                [event.prev_hash, event.digest, event.hash, event.seq],
            )
            prev = event.hash

    assert next(iter_breaks(), None) is None
    assert first_break(workers=2, parallel_min=1) is None


@pytest.mark.django_db(transaction=True)
def test_with_the_store_statements_off_the_walk_is_its_portable_twin_and_names_the_same_break(settings: Any) -> None:
    for n in range(6):
        record_alone("test.event", actor=ACTOR, data={"n": n})
    seal_all()
    with transaction.atomic():
        tamper("UPDATE audit_event SET data = %s WHERE seq = 4", ['{"n": 40}'])
    edited = ChainBreak(4, "its content does not match its hash")

    with CaptureQueriesContext(connection) as asked_here:
        assert first_break(workers=2, parallel_min=1) == edited
    settings.GATEHOUSE_POSTGRESQL_STORE = False
    with CaptureQueriesContext(connection) as asked_by_the_twin:
        assert first_break(workers=2, parallel_min=1) == edited

    # The store's walkers read the chain over connections of their own; the twin reads it over Django's.
    assert not [query for query in asked_here if '"audit_event"."prev_hash"' in query["sql"]]
    assert [query for query in asked_by_the_twin if '"audit_event"."prev_hash"' in query["sql"]]
