"""Writing and verifying the audit hash chain.

Each event's hash covers the previous event's hash and its own fields, so any
edit, insertion or deletion inside the chain breaks every hash after it; signed
checkpoints (audit/checkpoints.py) make cutting off the tail detectable too.
Writers insert events unsealed and wait on no one; the sequencer (audit/sequencer.py)
gives committed events their seq and hash. The walks here cover sealed events only.

Sealed events hash the digest of their canonical content (audit/hashing.py, the
sealed form). Events chained before the sequencer hash their content directly, in
the canonical form (audit/canonical.py, RFC 8785), and events written before that
kept their hash of the earlier form (`_legacy_json`), and verify by it: each form is
one text per JSON value, so content that matches its hash under any is the content
that was hashed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from functools import partial
from itertools import chain
from typing import TypedDict
from uuid import UUID

import orjson
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.db.models import F, Max, Min, TextField
from django.db.models.expressions import Combinable
from django.db.models.functions import Cast
from typing_extensions import Unpack

from audit import store
from audit.canonical import normalized
from audit.hashing import GENESIS_HASH, chained, content_digest, event_hash, sealed_hash
from audit.models import HASHED_FIELDS, Event
from audit.signals import event_recorded
from audit.typealiases import JSONObject, JSONValue, SQLRow


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


class EventFields(TypedDict, total=False):
    """What an event says besides its action and actor."""

    call_id: UUID | None
    agent_name: str
    tool_name: str
    data: JSONObject | None


def record(action: str, *, actor: tuple[str, str], **fields: Unpack[EventFields]) -> Event:
    """Append one event to the chain, inside the caller's transaction.

    The caller's transaction is the point: the event commits or rolls back with
    the state change it describes. It is inserted unsealed and takes no lock; the
    sequencer seals it once committed.
    """
    return record_event(new_event(action, actor=actor, **fields))


def record_event(event: Event) -> Event:
    """Insert `event` (`new_event`) unsealed inside the caller's transaction, and tell who listens after commit."""
    if not connection.in_atomic_block:
        raise RuntimeError("audit.record() must run inside the transaction it describes")
    store.append(event)
    transaction.on_commit(partial(recorded, event))
    return event


def recorded(event: Event) -> None:
    """Tell the apps above audit that `event` is committed."""
    event_recorded.send(sender=Event, event=event)


def new_event(action: str, *, actor: tuple[str, str], **fields: Unpack[EventFields]) -> Event:
    """Return an event not yet inserted."""
    return Event(
        actor_kind=actor[0],
        actor_name=actor[1][:150],
        action=action,
        call_id=fields.get("call_id"),
        agent_name=fields.get("agent_name", "")[:150],
        tool_name=fields.get("tool_name", "")[:100],
        # Normalised so the hash covers exactly what the database stores and gives back.
        data=normalized(fields.get("data") or {}),
    )


@transaction.atomic
def record_alone(action: str, *, actor: tuple[str, str], **fields: Unpack[EventFields]) -> Event:
    """Append an event that describes no other database change (e.g. a refused request)."""
    return record(action, actor=actor, **fields)


# An event's hashed columns but its data, as `_breaks` reads them: seq, created_at (text on PostgreSQL), actor_kind,
# actor_name, action, call_id (text on PostgreSQL), agent_name, tool_name.
_Columns = tuple[int, datetime | str, str, str, str, UUID | str | None, str, str]


@dataclass(frozen=True)
class ChainBreak:
    seq: int
    reason: str


def iter_breaks(chunk_size: int = 10_000) -> Iterator[ChainBreak]:
    """Yield the places where the sealed chain does not verify, in order (unsealed events are not in it yet).

    Streams plain tuples (no model instances), `data` as its JSON text and, on
    PostgreSQL, `created_at` as its text (`_stamp`): a walk over a million events is
    bound by decoding and re-encoding, so `_breaks` tries orjson first and the exact
    canonical form only when that does not match, and timestamps skip the driver's
    timezone-aware loader.
    """
    columns = [
        name if name != "call_id" else "call_text" for name in HASHED_FIELDS if name not in ("created_at", "data")
    ]
    rows = (
        Event.objects.filter(seq__isnull=False)
        .order_by("seq")
        .annotate(created_text=_created_at_column(), call_text=_call_id_column(), data_text=Cast("data", TextField()))
        .values_list("created_text", "data_text", *columns, "digest", "prev_hash", "hash")
    )
    found = rows.iterator(chunk_size=chunk_size)
    if connection.vendor != "postgresql":  # created_at comes as a datetime: its hashed text
        found = ((created.isoformat(), *rest) for created, *rest in found)
    yield from _breaks(found, 1, GENESIS_HASH, [])


def _breaks(
    rows: Iterator[SQLRow], expected_seq: int, prev_hash: str, tail: list[tuple[int, str]]
) -> Iterator[ChainBreak]:
    """Yield the breaks among `rows` (ordered by seq) after (`expected_seq` − 1, `prev_hash`).

    The walk's hot path (`tail` receives the last (seq, hash) walked): named columns; created_at's UTC text with
    six digits of fraction rebuilt from its second's (`_stamp` for other forms); one dict literal, checked with
    orjson inline, by the event's form (a sealed event has a digest); `_content_matches` decides the rest.
    """
    seq, second, prefix = None, "", ""
    loads, dumps, sha256, sorted_keys = orjson.loads, orjson.dumps, hashlib.sha256, orjson.OPT_SORT_KEYS
    for created, data_text, seq, kind, actor, action, call_id, agent, tool, digest, stored_prev, stored_hash in rows:
        if seq != expected_seq:
            yield ChainBreak(expected_seq, f"event #{expected_seq} is missing")
        if stored_prev != prev_hash:
            yield ChainBreak(seq, "does not chain to the event before it")
        if created[:19] != second:
            second, prefix = created[:19], _second_prefix(created[:19])
        stamp = prefix + created[19:26] + "+00:00" if created[26:] == "+00" and prefix else _stamp(created, prefix)
        try:
            content = {
                "action": action, "actor_kind": kind, "actor_name": actor, "agent_name": agent,
                "call_id": call_id or None, "created_at": stamp, "data": loads(data_text), "tool_name": tool,
            }  # fmt: skip
            if digest is None:
                text = dumps({**content, "seq": seq}, option=sorted_keys)
                intact = sha256(stored_prev.encode() + text).hexdigest() == stored_hash
            else:
                computed = sha256(dumps(content, option=sorted_keys)).hexdigest()
                sealed = sha256(f"{stored_prev}\n{seq}\n{computed}".encode()).hexdigest()
                intact = computed == digest and sealed == stored_hash
        except (orjson.JSONDecodeError, orjson.JSONEncodeError):
            intact = False
        if not intact and not _content_matches(
            (seq, stamp, kind, actor, action, call_id, agent, tool), data_text, digest, stored_prev, stored_hash
        ):
            yield ChainBreak(seq, "its content does not match its hash")
        expected_seq, prev_hash = seq + 1, stored_hash
    if seq is not None:
        tail.append((expected_seq - 1, prev_hash))


def _second_prefix(head: str) -> str:
    """Return the hashed text's "YYYY-MM-DDTHH:MM:SS" for the first 19 characters of PostgreSQL's ISO text, or "".

    Years beyond 9999 push the dash (and BC dates end otherwise than `+00`): those,
    and text in any other form, take `_stamp`.
    """
    if len(head) == 19 and head[4] == "-" and head[10] == " ":
        return f"{head[:10]}T{head[11:]}"
    return ""


def _stamp(created: str, prefix: str) -> str:
    """Return the text the hash covers for created_at's text in any ISO form, `prefix` its `_second_prefix`.

    That is the UTC datetime's isoformat(): from PostgreSQL's UTC text with a
    fraction trimmed of trailing zeros (or none), else read as a datetime. Text no
    aware datetime reads as (BC, beyond 9999, infinity) is returned as it is: no
    event was hashed with it, and it cannot equal an isoformat().
    """
    fraction = created[19:-3]
    if prefix and created[-3:] == "+00" and (not fraction or (fraction[0] == "." and 1 < len(fraction) <= 7)):
        return f"{prefix}{fraction.ljust(7, '0') if fraction else ''}+00:00"
    try:
        moment = datetime.fromisoformat(created)
        return moment.astimezone(UTC).isoformat() if moment.tzinfo is not None else created
    except (ValueError, OverflowError):
        return created


# Below this many events the walk runs in this process (and this connection: it
# sees the caller's uncommitted events, as the tests' do).
PARALLEL_MIN_EVENTS = 200_000


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
    with store.sealed_range(conninfo, low, high) as rows:
        first = next(rows, None)
        if first is None:
            return _RangeWalk(None, None, None)
        head = (first[2], first[-2])
        tail: list[tuple[int, str]] = []
        found = next(_breaks(chain((first,), rows), head[0], head[1], tail), None)
        return _RangeWalk(head, found, tail[0] if tail else None)


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
    conninfo = store.conninfo()
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
    """Return created_at as text on PostgreSQL (`_stamp` reads it in the session's time zone), else the column."""
    return Cast("created_at", TextField()) if connection.vendor == "postgresql" else F("created_at")


def _call_id_column() -> Combinable:
    """Return call_id as text on PostgreSQL (the form the hash covers), else the column."""
    return Cast("call_id", TextField()) if connection.vendor == "postgresql" else F("call_id")


def _content_matches(columns: _Columns, data_text: str, digest: str | None, prev_hash: str, stored_hash: str) -> bool:
    """Return whether an event's columns and data hash to `stored_hash`, by the exact forms.

    The walk checks with orjson first: its compact, key-sorted output is the
    canonical form's for most of the JSON the chain holds, but not all (float
    exponents, integers beyond 64 bits). Only the exact forms decide that an event
    was altered: a sealed event's digest of its canonical content, chained; else the
    canonical form, then the earlier one events written before it were hashed in
    (their floats as they were written, then as PostgreSQL gave them back).
    """
    fields = Event.fields_to_hash(*columns, json.loads(data_text))
    if digest is not None:
        seq = fields.pop("seq")
        computed = content_digest(fields)
        return computed == digest and isinstance(seq, int) and sealed_hash(prev_hash, seq, computed) == stored_hash
    if event_hash(prev_hash, fields) == stored_hash or chained(prev_hash, _legacy_json(fields)) == stored_hash:
        return True
    return chained(prev_hash, _legacy_json(_as_legacy_floats(fields))) == stored_hash


def first_break(workers: int | None = None, parallel_min: int = PARALLEL_MIN_EVENTS) -> ChainBreak | None:
    """Return the first place the chain fails to verify, or None if it is intact.

    On PostgreSQL a chain of at least `parallel_min` events is walked in `workers`
    processes (default: one per CPU) over disjoint ranges of `seq`, each range read by
    the store's own statement (`store.sealed_range`), and names the same break as the
    sequential walk (`iter_breaks`, its portable twin, which runs otherwise).
    """
    workers = workers or os.cpu_count() or 1
    if store.postgresql_statements() and workers > 1 and not connection.in_atomic_block:
        bounds = Event.objects.aggregate(low=Min("seq"), high=Max("seq"))  # unsealed events (NULL) count in neither
        low, high = bounds["low"], bounds["high"]
        if low is not None and high - low + 1 >= max(parallel_min, workers):
            return parallel_first_break(workers, low, high)
    return next(iter_breaks(), None)
