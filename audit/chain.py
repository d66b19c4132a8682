"""Writing and verifying the audit hash chain.

Each event's hash covers the previous event's hash and its own fields, so any
edit, insertion or deletion inside the chain breaks every hash after it; signed
checkpoints (audit/checkpoints.py) make cutting off the tail detectable too.
Writers are serialised (a transaction-scoped advisory lock on PostgreSQL,
IMMEDIATE transactions on SQLite) so two writers never chain to the same head.

Events are hashed in the one canonical form (audit/canonical.py, RFC 8785).
Events written before it kept their hash of the earlier form (`_legacy_json`), and
verify by it: each form is one text per JSON value, so content that matches its
hash under either is the content that was hashed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from uuid import UUID

import orjson
import psycopg
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.db.models import F, Max, Min, TextField
from django.db.models.expressions import Combinable, RawSQL
from django.db.models.functions import Cast
from django.utils import timezone
from psycopg.conninfo import make_conninfo

from audit.canonical import canonical_json, normalized
from audit.models import HASHED_FIELDS, Event
from audit.signals import event_recorded
from audit.typealiases import JSONObject, JSONValue, SQLRow, SQLValue

GENESIS_HASH = "0" * 64
# An arbitrary, fixed key for pg_advisory_xact_lock: "audit chain".
_CHAIN_LOCK_KEY = 0x6761746568


def event_hash(prev_hash: str, fields: dict[str, object]) -> str:
    """Return the hash that chains `fields` onto `prev_hash`."""
    return _chained(prev_hash, canonical_json(fields))


def _chained(prev_hash: str, text: str) -> str:
    return hashlib.sha256((prev_hash + text).encode("utf-8")).hexdigest()


def _legacy_json(value: JSONValue) -> str:
    """Return the text events were hashed in before the canonical form: Python's sorted, compact JSON."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, cls=DjangoJSONEncoder)


def _as_legacy_floats(value: JSONValue) -> JSONValue:
    """Return `value` with each integer of 17+ digits that is a float's Python text taken as that float.

    The earlier form hashed a float like 1e16 as `1e+16`, and PostgreSQL's jsonb
    hands it back as the integer 10000000000000000: the same number, which this
    writes as the earlier form did.
    """
    if isinstance(value, dict):
        return {key: _as_legacy_floats(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_as_legacy_floats(item) for item in value]
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**16:
        try:
            as_float = float(value)
        except OverflowError:
            return value
        return as_float if Decimal(repr(as_float)) == value else value
    return value


_LOCK_SQL = "SELECT pg_advisory_xact_lock(%s)"

# created_at exactly as the hash covers it: Python's isoformat() of a UTC datetime (no
# fraction when it is zero). The append hashes this text; the walkers read it back.
_CREATED_TEXT_SQL = (
    "to_char({0} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS') || CASE WHEN extract(microseconds FROM {0})::bigint"
    " %% 1000000 = 0 THEN '' ELSE to_char({0} AT TIME ZONE 'UTC', '.US') END || '+00:00'"
)

# Appends one event after the head. It is sent after the chain lock (_LOCK_SQL) in
# the same pipeline, and gets its own snapshot, so it reads the head only once the
# lock is held. It reads the head, stamps the time and computes the hash in SQL, so
# the lock is held for this statement and the COMMIT only.
_APPEND_SQL = f"""
WITH head AS (SELECT seq, hash FROM audit_event ORDER BY seq DESC LIMIT 1),
next AS (
    SELECT COALESCE((SELECT seq FROM head), 0) + 1 AS seq,
           COALESCE((SELECT hash FROM head), %(genesis)s) AS prev_hash,
           clock_timestamp() AS at
),
stamped AS (
    SELECT seq, prev_hash, at, {_CREATED_TEXT_SQL.format("at")} AS at_text
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


def _append(event: Event) -> None:
    """Take the chain lock, chain `event` after the head and insert it."""
    if connection.vendor != "postgresql":  # SQLite: the IMMEDIATE transaction already serialises writers
        head = Event.objects.order_by("-seq").values_list("seq", "hash").first()
        event.seq, event.prev_hash = (head[0] + 1, head[1]) if head else (1, GENESIS_HASH)
        event.created_at = timezone.now()
        event.hash = event_hash(event.prev_hash, event.hashed_fields())
        event.save(force_insert=True)
        return
    with connection.cursor() as cursor:
        # Errors surface when the pipeline syncs, outside Django's cursor: wrap them as it would.
        with connection.wrap_database_errors, connection.connection.pipeline():
            cursor.execute(_LOCK_SQL, [_CHAIN_LOCK_KEY])
            cursor.execute(_APPEND_SQL, _append_params(event))
        _appended(event, cursor.fetchone())


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


def _appended(event: Event, row: Sequence[SQLValue]) -> None:
    event.pk, event.seq, event.created_at, event.prev_hash, event.hash = row
    event._state.adding = False
    event._state.db = connection.alias


def record(
    action: str,
    *,
    actor: tuple[str, str],
    call_id: UUID | None = None,
    agent_name: str = "",
    tool_name: str = "",
    data: JSONObject | None = None,
) -> Event:
    """Append one event to the chain, inside the caller's transaction.

    The caller's transaction is the point: the event commits or rolls back with
    the state change it describes. Everything but the append itself is prepared
    before the chain lock is taken: the lock serialises every writer until commit.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("audit.record() must run inside the transaction it describes")
    event = _new_event(action, actor, call_id, agent_name, tool_name, data)
    _append(event)
    event_recorded.send(sender=Event, event=event)
    return event


def _new_event(
    action: str,
    actor: tuple[str, str],
    call_id: UUID | None,
    agent_name: str,
    tool_name: str,
    data: JSONObject | None,
) -> Event:
    """Return an event not yet chained."""
    return Event(
        actor_kind=actor[0],
        actor_name=actor[1][:150],
        action=action,
        call_id=call_id,
        agent_name=agent_name[:150],
        tool_name=tool_name[:100],
        # Normalised so the hash covers exactly what the database stores and gives back.
        data=normalized(data or {}),
    )


@transaction.atomic
def record_alone(
    action: str,
    *,
    actor: tuple[str, str],
    call_id: UUID | None = None,
    agent_name: str = "",
    tool_name: str = "",
    data: JSONObject | None = None,
) -> Event:
    """Append an event that describes no other database change (e.g. a refused request)."""
    return record(action, actor=actor, call_id=call_id, agent_name=agent_name, tool_name=tool_name, data=data)


# An event's hashed columns but its data, as `_breaks` reads them: seq, created_at (text on PostgreSQL), actor_kind,
# actor_name, action, call_id (text on PostgreSQL), agent_name, tool_name.
_Columns = tuple[int, datetime | str, str, str, str, UUID | str | None, str, str]


@dataclass(frozen=True)
class ChainBreak:
    seq: int
    reason: str


def iter_breaks(chunk_size: int = 10_000) -> Iterator[ChainBreak]:
    """Yield the places where the stored chain does not verify, in order.

    Streams plain tuples (no model instances), `data` as its JSON text and, on
    PostgreSQL, `created_at` as ISO text: a walk over a million events is bound by
    decoding and re-encoding, so `_breaks` tries orjson first and the exact
    canonical form only when that does not match, and timestamps skip the driver's
    timezone-aware loader.
    """
    columns = [
        name if name != "call_id" else "call_text" for name in HASHED_FIELDS if name not in ("created_at", "data")
    ]
    rows = (
        Event.objects.order_by("seq")
        .annotate(created_text=_created_at_column(), call_text=_call_id_column(), data_text=Cast("data", TextField()))
        .values_list("created_text", "data_text", *columns, "prev_hash", "hash")
    )
    yield from _breaks(rows.iterator(chunk_size=chunk_size), 1, GENESIS_HASH, [])


def _breaks(
    rows: Iterator[SQLRow], expected_seq: int, prev_hash: str, tail: list[tuple[int, str]]
) -> Iterator[ChainBreak]:
    """Yield the breaks among `rows` (ordered by seq) after (`expected_seq` − 1, `prev_hash`).

    When the rows run out, `tail` receives the last (seq, hash) walked. The loop is
    the walk's hot path (a million events): the columns are named rather than packed
    into a tuple, and the orjson check runs inline; `_content_matches` decides the rest.
    """
    seq = None
    loads, dumps, sha256, sorted_keys = orjson.loads, orjson.dumps, hashlib.sha256, orjson.OPT_SORT_KEYS
    fields_to_hash = Event.fields_to_hash
    for created, data_text, seq, kind, actor, action, call_id, agent, tool, stored_prev, stored_hash in rows:
        if seq != expected_seq:
            yield ChainBreak(expected_seq, f"event #{expected_seq} is missing")
        if stored_prev != prev_hash:
            yield ChainBreak(seq, "does not chain to the event before it")
        try:  # created: the hashed text on PostgreSQL, a datetime elsewhere
            fields = fields_to_hash(seq, created, kind, actor, action, call_id, agent, tool, loads(data_text))
            intact = sha256(stored_prev.encode() + dumps(fields, option=sorted_keys)).hexdigest() == stored_hash
        except (orjson.JSONDecodeError, orjson.JSONEncodeError):
            intact = False
        if not intact and not _content_matches(
            (seq, created, kind, actor, action, call_id, agent, tool), data_text, stored_prev, stored_hash
        ):
            yield ChainBreak(seq, "its content does not match its hash")
        expected_seq, prev_hash = seq + 1, stored_hash
    if seq is not None:
        tail.append((expected_seq - 1, prev_hash))


# Below this many events the walk runs in this process (and this connection: it
# sees the caller's uncommitted events, as the tests' do).
PARALLEL_MIN_EVENTS = 200_000

# One range of the chain, read by a walker process over its own connection.
_RANGE_SQL = f"""
SELECT {_CREATED_TEXT_SQL.format("created_at")}, data::text,
       seq, actor_kind, actor_name, action, call_id::text, agent_name, tool_name, prev_hash, hash
FROM audit_event WHERE seq >= %s AND seq <= %s ORDER BY seq
"""  # noqa: S608 — no values interpolated


@dataclass(frozen=True)
class _RangeWalk:
    """What one walker found in its range: its first row's (seq, prev_hash), its first break, its last (seq, hash)."""

    head: tuple[int, str] | None
    first_break: ChainBreak | None
    tail: tuple[int, str] | None


def _walk_range(conninfo: str, low: int, high: int) -> _RangeWalk:
    """Walk the events with low ≤ seq ≤ high (in a forked process, over a connection of its own).

    Each event is checked against its own stored `prev_hash`, so a range verifies
    on its own; only its first row's link to the range before it is left to
    `parallel_first_break`, which compares the seams.
    """
    with psycopg.connect(conninfo) as conn, conn.transaction(), conn.cursor(name="audit_walk") as cursor:
        cursor.itersize = 20_000
        rows = iter(cursor.execute(_RANGE_SQL, (low, high)))
        first = next(rows, None)
        if first is None:
            return _RangeWalk(None, None, None)
        head = (first[2], first[-2])
        tail: list[tuple[int, str]] = []
        found = next(_breaks(_chain_first(first, rows), head[0], head[1], tail), None)
        return _RangeWalk(head, found, tail[0] if tail else None)


def _chain_first(first: SQLRow, rows: Iterator[SQLRow]) -> Iterator[SQLRow]:
    yield first
    yield from rows


def _conninfo() -> str:
    settings = connection.settings_dict
    names = {"dbname": "NAME", "user": "USER", "password": "PASSWORD", "host": "HOST", "port": "PORT"}
    kwargs: dict[str, str | int] = {key: settings[name] for key, name in names.items() if settings.get(name)}
    for option in ("sslmode", "sslrootcert", "sslcert", "sslkey", "options"):
        if option in settings.get("OPTIONS", {}):
            kwargs[option] = settings["OPTIONS"][option]
    return make_conninfo("", **kwargs)


def parallel_first_break(workers: int, low: int, high: int) -> ChainBreak | None:
    """Return the first break of the chain's events low..high, walked in `workers` forked processes.

    The ranges are walked independently; the seams are then checked in order
    exactly as the sequential walk would check them (a missing event at the seam,
    then the first row's link to the last hash before it), so the first break
    named is the same.
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    step = -(-(high - low + 1) // workers)
    bounds = [(start, min(start + step - 1, high)) for start in range(low, high + 1, step)]
    conninfo = _conninfo()
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=len(bounds), mp_context=context) as pool:
        walks = list(pool.map(_walk_range, [conninfo] * len(bounds), *zip(*bounds, strict=True)))
    last_seq, last_hash = 0, GENESIS_HASH
    for walk in walks:
        if walk.head is None:
            continue
        first_seq, first_prev = walk.head
        if first_seq != last_seq + 1:
            return ChainBreak(last_seq + 1, f"event #{last_seq + 1} is missing")
        if first_prev != last_hash:
            return ChainBreak(first_seq, "does not chain to the event before it")
        if walk.first_break is not None:
            return walk.first_break
        assert walk.tail is not None  # a walk that found no break ran to its end
        last_seq, last_hash = walk.tail
    return None


def _created_at_column() -> Combinable:
    """Return created_at as the text the hash covers on PostgreSQL, else the column."""
    if connection.vendor != "postgresql":
        return F("created_at")
    return RawSQL(_CREATED_TEXT_SQL.format('"audit_event"."created_at"'), ())  # noqa: S611 — no values interpolated


def _call_id_column() -> Combinable:
    """Return call_id as text on PostgreSQL (the form the hash covers), else the column."""
    return Cast("call_id", TextField()) if connection.vendor == "postgresql" else F("call_id")


def _content_matches(columns: _Columns, data_text: str, prev_hash: str, stored_hash: str) -> bool:
    """Return whether an event's columns and data hash to `stored_hash`, by the exact forms.

    The walk checks with orjson first: its compact, key-sorted output is the
    canonical form's for most of the JSON the chain holds, but not all (float
    exponents, integers beyond 64 bits). Only the exact forms decide that an event
    was altered: the canonical one, then the earlier one events written before it
    were hashed in (their floats as they were written, then as PostgreSQL gave them back).
    """
    fields = Event.fields_to_hash(*columns, json.loads(data_text))
    if event_hash(prev_hash, fields) == stored_hash or _chained(prev_hash, _legacy_json(fields)) == stored_hash:
        return True
    return _chained(prev_hash, _legacy_json(_as_legacy_floats(fields))) == stored_hash


def first_break(workers: int | None = None, parallel_min: int = PARALLEL_MIN_EVENTS) -> ChainBreak | None:
    """Return the first place the chain fails to verify, or None if it is intact.

    On PostgreSQL a chain of at least `parallel_min` events is walked in `workers`
    processes (default: one per CPU) over disjoint ranges of `seq`; the answer is
    the same as the sequential walk's (`parallel_first_break`).
    """
    workers = workers or os.cpu_count() or 1
    if connection.vendor == "postgresql" and workers > 1 and not connection.in_atomic_block:
        bounds = Event.objects.aggregate(low=Min("seq"), high=Max("seq"))
        low, high = bounds["low"], bounds["high"]
        if low is not None and high - low + 1 >= max(parallel_min, workers):
            return parallel_first_break(workers, low, high)
    return next(iter_breaks(), None)
