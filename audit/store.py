"""Inserting, sealing and walking events: PostgreSQL's own statements, beside their portable twins.

Writers insert an event unsealed (no seq, no hashes) with the ORM, in their own
transaction, and take no lock: two writers never wait on each other for the audit log.
`queue_insert` is the same INSERT for approvals/store.py's one-message proposal.

Sealers (audit/sequencer.py) serialise among themselves only: a transaction-scoped
advisory lock on PostgreSQL, the IMMEDIATE transaction on SQLite. A batch of seals is
written by one statement (`write_seals`): on PostgreSQL an UPDATE joined to the batch,
its portable twin the ORM's bulk_update. Both touch only events still unsealed, and
report how many they sealed, so a batch that raced another sealer is rolled back whole.

`audit_verify`'s walkers read their ranges of the chain with `sealed_range`, each over a
connection of its own; the portable twin is the sequential walk of audit/chain.py.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

import psycopg
from django.conf import settings
from django.db import connection
from django.db.backends.utils import CursorWrapper
from django.db.models import Field
from django.utils import timezone
from psycopg.conninfo import make_conninfo

from audit.hashing import GENESIS_HASH, content_digest
from audit.models import Event
from audit.typealiases import SQLRow, SQLValue

# Arbitrary, fixed keys for the advisory locks: "audit seal" (one batch at a time) and
# "audit lead" (one sequencer process sealing, the others waiting to take over).
SEAL_LOCK_KEY = 0x6761746573
LEADER_LOCK_KEY = 0x676174656C
SEALING_COLUMNS = ("seq", "prev_hash", "hash", "sealed_at")

# The batch travels as four comma-joined texts, split by PostgreSQL: psycopg dumps a list
# element by element in Python, where a join is one call in C (ids and seqs are digits,
# hashes hex: no commas). The id range bounds the events side of the join by the batch,
# whatever the planner believes: its statistics, taken while few events waited, can say
# "one unsealed event" when a whole backlog waits, and it would then hash every unsealed
# event for every batch (a backlog sealed in quadratic time).
_SEAL_SQL = """
UPDATE audit_event AS e SET seq = u.seq, prev_hash = u.prev_hash, hash = u.hash, sealed_at = %s
FROM unnest(string_to_array(%s, ',')::bigint[], string_to_array(%s, ',')::bigint[],
            string_to_array(%s, ','), string_to_array(%s, ',')) AS u(id, seq, prev_hash, hash)
WHERE e.id = u.id AND e.seq IS NULL AND e.id BETWEEN %s AND %s
"""


def postgresql_statements() -> bool:
    """Return whether the store modules send PostgreSQL's own statements (else their portable twins)."""
    return connection.vendor == "postgresql" and settings.GATEHOUSE_POSTGRESQL_STORE


# ------------------------------------------------------------------ inserting


def append(event: Event) -> None:
    """Insert `event` unsealed, stamped and digested, inside the caller's transaction."""
    prepare(event)
    event.save(force_insert=True)


def prepare(event: Event) -> None:
    """Stamp `event` with the time and the digest of its content; its sealing columns stay NULL."""
    event.created_at = timezone.now()
    event.digest = content_digest(event.content_fields())


def queue_insert(cursor: CursorWrapper, event: Event) -> None:
    """Queue the INSERT of `event` (prepared here) on `cursor`, as the ORM writes it; `inserted` reads it back."""
    prepare(event)
    db = cursor.db  # the connection itself: `django.db.connection` would look it up again for every field
    values = [field.get_db_prep_save(field.pre_save(event, True), db) for field in _inserted_fields()]
    cursor.execute(_insert_sql(), values)


@functools.cache
def _inserted_fields() -> list[Field[object, object]]:
    return [field for field in Event._meta.concrete_fields if field.column != "id"]


@functools.cache
def _insert_sql() -> str:
    """Return the event's INSERT: the model does not change, so it is built once."""
    fields = _inserted_fields()
    columns = ", ".join(connection.ops.quote_name(field.column) for field in fields)
    placeholders = ", ".join(["%s"] * len(fields))
    return f"INSERT INTO audit_event ({columns}) VALUES ({placeholders}) RETURNING id"  # noqa: S608


def inserted(event: Event, row: Sequence[SQLValue]) -> None:
    """Fill `event` from the row its INSERT returned."""
    (event.pk,) = row
    event._state.adding = False
    event._state.db = connection.alias


# ------------------------------------------------------------------ sealing


@dataclass(frozen=True)
class Seal:
    """An event's place in the chain, about to be written."""

    id: int
    seq: int
    prev_hash: str
    hash: str


def lock_sealing() -> None:
    """Hold the sealers' lock until this transaction ends (PostgreSQL; SQLite's IMMEDIATE transaction already does)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [SEAL_LOCK_KEY])


def sealed_head() -> tuple[int, str]:
    """Return the last sealed event's (seq, hash), or (0, genesis) when none is."""
    head = Event.objects.filter(seq__isnull=False).order_by("-seq").values_list("seq", "hash").first()
    seq, head_hash = head if head is not None else (None, None)
    return (seq, head_hash) if seq is not None and head_hash is not None else (0, GENESIS_HASH)


def unsealed(limit: int) -> list[tuple[int, str | None]]:
    """Return up to `limit` (id, digest) of the unsealed events this transaction sees, oldest insert first."""
    rows = Event.objects.filter(seq__isnull=True).order_by("id").values_list("id", "digest")[:limit]
    return list(rows)


def any_unsealed() -> bool:
    """Return whether any committed event waits to be sealed."""
    return Event.objects.filter(seq__isnull=True).exists()


def unsealed_count() -> int:
    """Return how many events wait to be sealed."""
    return Event.objects.filter(seq__isnull=True).count()


def write_seals(seals: list[Seal], sealed_at: datetime) -> int:
    """Write `seals` in one statement, to events still unsealed only; return how many were sealed."""
    if not seals:
        return 0
    if not postgresql_statements():
        return _write_seals_portably(seals, sealed_at)
    ids = [seal.id for seal in seals]
    joined = [",".join(map(str, ids)), ",".join(str(seal.seq) for seal in seals)]
    joined += [",".join(seal.prev_hash for seal in seals), ",".join(seal.hash for seal in seals)]
    with connection.cursor() as cursor:
        cursor.execute(_SEAL_SQL, [sealed_at, *joined, min(ids), max(ids)])
        return int(cursor.rowcount)


# Events per UPDATE of the portable twin: bulk_update binds about nine parameters an event,
# and PostgreSQL takes at most 65,535 in one statement (SQLite's own limit is applied by Django).
PORTABLE_SEALS_PER_STATEMENT = 1_000


def _write_seals_portably(seals: list[Seal], sealed_at: datetime) -> int:
    """The portable twin: bulk_update filtered to unsealed events, in statements the database can bind."""
    events = [
        Event(pk=seal.id, seq=seal.seq, prev_hash=seal.prev_hash, hash=seal.hash, sealed_at=sealed_at) for seal in seals
    ]
    unsealed_only = Event.objects.filter(seq__isnull=True)
    return unsealed_only.bulk_update(events, list(SEALING_COLUMNS), batch_size=PORTABLE_SEALS_PER_STATEMENT)


# ------------------------------------------------------------------ walking

# One range of the chain, as audit/chain.py's walk reads it: created_at as its plain text
# in the form _WALK_SESSION sets (ISO, UTC: `2026-12-04 15:05:54.098403+00`), from which
# the walk rebuilds the hashed text (cheaper, per event, than PostgreSQL's to_char), and
# data as its JSON text. The portable twin is the walk's own ORM query (`chain.iter_breaks`).
_RANGE_SQL = """
SELECT created_at::text, data::text,
       seq, actor_kind, actor_name, action, call_id::text, agent_name, tool_name, digest, prev_hash, hash
FROM audit_event WHERE seq >= %s AND seq <= %s ORDER BY seq
"""
_WALK_SESSION = "SELECT set_config('TimeZone', 'UTC', true), set_config('DateStyle', 'ISO', true)"
# Rows fetched from a walker's cursor at a time.
_WALK_PAGE = 20_000


@contextmanager
def sealed_range(conninfo: str, low: int, high: int) -> Iterator[Iterator[SQLRow]]:
    """Yield the events with low ≤ seq ≤ high in seq order, as the walk's rows, over a connection of its own.

    PostgreSQL's (a walker process of audit/chain.py's parallel walk): one transaction,
    so one snapshot, read from a server-side cursor a page at a time.
    """
    with psycopg.connect(conninfo) as conn, conn.transaction(), conn.cursor(name="audit_walk") as cursor:
        conn.execute(_WALK_SESSION)
        yield itertools.chain.from_iterable(_pages(cursor.execute(_RANGE_SQL, (low, high))))


def _pages(cursor: psycopg.ServerCursor[SQLRow]) -> Iterator[list[SQLRow]]:
    """Yield the cursor's rows a page at a time (iterating the cursor itself runs Python code for every row)."""
    while page := cursor.fetchmany(_WALK_PAGE):
        yield page


# ------------------------------------------------------------------ leading


def conninfo() -> str:
    """Return the connection string of Django's database, for a psycopg connection of a process's own."""
    database = connection.settings_dict
    names = {"dbname": "NAME", "user": "USER", "password": "PASSWORD", "host": "HOST", "port": "PORT"}
    kwargs: dict[str, str | int] = {key: database[name] for key, name in names.items() if database.get(name)}
    for option in ("sslmode", "sslrootcert", "sslcert", "sslkey", "options"):
        if option in database.get("OPTIONS", {}):
            kwargs[option] = database["OPTIONS"][option]
    return make_conninfo("", **kwargs)


def try_lead(session: psycopg.Connection) -> bool:
    """Return whether `session` now holds the leader's lock (PostgreSQL; held until the session ends)."""
    row = session.execute("SELECT pg_try_advisory_lock(%s)", [LEADER_LOCK_KEY]).fetchone()
    return bool(row and row[0])
