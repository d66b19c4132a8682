"""Appending an event to the chain: PostgreSQL's own statement, beside its portable twin.

Writers are serialised so two never chain to the same head: a transaction-scoped
advisory lock on PostgreSQL, the IMMEDIATE transaction on SQLite. The lock is the
point every writer of the whole installation passes through, so on PostgreSQL the
head is read, the time stamped and the hash computed by one statement sent with
the lock (`queue_append`): the lock is then held for that message and the COMMIT
only, not for a read, a hash in Python and an insert (the portable twin, which
also runs with `GATEHOUSE_POSTGRESQL_STORE` off). docs/benchmarks.md gives the
same-run A/B that keeps the PostgreSQL statement.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.conf import settings
from django.db import connection
from django.db.backends.utils import CursorWrapper
from django.utils import timezone

from audit.canonical import canonical_json
from audit.hashing import CREATED_TEXT_SQL, GENESIS_HASH, event_hash
from audit.models import Event
from audit.typealiases import SQLRow, SQLValue

# An arbitrary, fixed key for pg_advisory_xact_lock: "audit chain".
CHAIN_LOCK_KEY = 0x6761746568
_LOCK_SQL = "SELECT pg_advisory_xact_lock(%s)"

# Sent after the chain lock in the same message; it gets its own snapshot, so it
# reads the head only once the lock is held.
_APPEND_SQL = f"""
WITH head AS (SELECT seq, hash FROM audit_event ORDER BY seq DESC LIMIT 1),
next AS (
    SELECT COALESCE((SELECT seq FROM head), 0) + 1 AS seq,
           COALESCE((SELECT hash FROM head), %(genesis)s) AS prev_hash,
           clock_timestamp() AS at
),
stamped AS (
    SELECT seq, prev_hash, at, {CREATED_TEXT_SQL.format("at")} AS at_text
    FROM next
)
INSERT INTO audit_event
    (seq, created_at, actor_kind, actor_name, action, call_id, agent_name, tool_name, data, prev_hash, hash)
SELECT seq, at, %(actor_kind)s, %(actor_name)s, %(action)s, %(call_id)s::uuid, %(agent_name)s, %(tool_name)s,
       %(data)s::jsonb, prev_hash,
       encode(sha256(convert_to(
           prev_hash || %(text_1)s || at_text || %(text_2)s || seq::text || %(text_3)s, 'UTF8'
       )), 'hex')
FROM stamped
RETURNING id, seq, created_at, prev_hash, hash
"""  # noqa: S608 — no values interpolated


def postgresql_statements() -> bool:
    """Return whether the store modules send PostgreSQL's own statements (else their portable twins)."""
    return connection.vendor == "postgresql" and settings.GATEHOUSE_POSTGRESQL_STORE


def append(event: Event) -> None:
    """Chain `event` after the head and insert it, inside the caller's transaction."""
    if not postgresql_statements():
        _append_portably(event)
        return
    with connection.cursor() as cursor:
        # Errors surface when the pipeline syncs, outside Django's cursor: wrap them as it would.
        with connection.wrap_database_errors, connection.connection.pipeline():
            queue_append(cursor, event)
        appended(event, cursor.fetchone())


def queue_append(cursor: CursorWrapper, event: Event) -> None:
    """Queue the chain lock and the append of `event` on `cursor` (PostgreSQL, in a pipeline); `appended` reads it."""
    cursor.execute(_LOCK_SQL, [CHAIN_LOCK_KEY])
    cursor.execute(_APPEND_SQL, _append_params(event))


def appended(event: Event, row: Sequence[SQLValue]) -> None:
    """Fill `event` from the row the append returned."""
    event.pk, event.seq, event.created_at, event.prev_hash, event.hash = row
    event._state.adding = False
    event._state.db = connection.alias


def _append_portably(event: Event) -> None:
    """The portable twin: take the chain lock, read the head, hash in Python, insert."""
    if connection.vendor == "postgresql":  # SQLite: the IMMEDIATE transaction already serialises writers
        with connection.cursor() as cursor:
            cursor.execute(_LOCK_SQL, [CHAIN_LOCK_KEY])
    head = Event.objects.order_by("-seq").values_list("seq", "hash").first()
    event.seq, event.prev_hash = (head[0] + 1, head[1]) if head else (1, GENESIS_HASH)
    event.created_at = timezone.now()
    event.hash = event_hash(event.prev_hash, event.hashed_fields())
    event.save(force_insert=True)


def _append_params(event: Event) -> dict[str, SQLValue]:
    text_1, text_2, text_3 = _hashed_text_around(event)
    return {
        "genesis": GENESIS_HASH,
        "data": canonical_json(event.data),
        **{name: getattr(event, name) for name in ("actor_kind", "actor_name", "action", "agent_name", "tool_name")},
        "call_id": event.call_id,
        "text_1": text_1,
        "text_2": text_2,
        "text_3": text_3,
    }


def _hashed_text_around(event: Event) -> tuple[str, str, str]:
    """Return the event's canonical text in three pieces: before created_at's value, before seq's, after seq's.

    Keys are sorted: action, actor_kind, actor_name, agent_name, call_id (plain
    values) come before `created_at`, so its first occurrence is the top-level key;
    `data` comes before `seq` and `tool_name` (a string) after it, so the last
    `,"seq":` is the top-level one (a quote inside a JSON string is always escaped).
    """
    text = canonical_json({**event.fields_to_hash(0, timezone.now(), *_content(event)), "created_at": "T"})
    before_time, _, rest = text.partition('"created_at":"T"')
    middle, _, after = rest.rpartition(',"seq":0')
    return before_time + '"created_at":"', '"' + middle + ',"seq":', after


def _content(event: Event) -> SQLRow:
    return (
        event.actor_kind,
        event.actor_name,
        event.action,
        event.call_id,
        event.agent_name,
        event.tool_name,
        event.data,
    )
