"""Writing and verifying the audit hash chain.

Each event's hash covers the previous event's hash and its own fields, so any
edit, insertion or deletion inside the chain breaks every hash after it; signed
checkpoints (audit/checkpoints.py) make cutting off the tail detectable too.
Writers are serialised (a transaction-scoped advisory lock on PostgreSQL,
IMMEDIATE transactions on SQLite) so two writers never chain to the same head.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.utils import timezone

from audit.models import HASHED_FIELDS, Event

GENESIS_HASH = "0" * 64
# An arbitrary, fixed key for pg_advisory_xact_lock: "audit chain".
_CHAIN_LOCK_KEY = 0x6761746568


def canonical_json(value: Any) -> str:
    """Return the one canonical JSON text of a value (sorted keys, no spaces)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, cls=DjangoJSONEncoder)


def event_hash(prev_hash: str, fields: dict[str, object]) -> str:
    """Return the hash that chains `fields` onto `prev_hash`."""
    payload = prev_hash + canonical_json(fields)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _lock_chain() -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_CHAIN_LOCK_KEY])


def record(
    action: str,
    *,
    actor: tuple[str, str],
    call_id: UUID | None = None,
    agent_name: str = "",
    tool_name: str = "",
    data: dict[str, Any] | None = None,
) -> Event:
    """Append one event to the chain, inside the caller's transaction.

    The caller's transaction is the point: the event commits or rolls back with
    the state change it describes.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("audit.record() must run inside the transaction it describes")
    _lock_chain()
    head = Event.objects.order_by("-seq").values_list("seq", "hash").first()
    seq, prev_hash = (head[0] + 1, head[1]) if head else (1, GENESIS_HASH)
    event = Event(
        seq=seq,
        created_at=timezone.now(),
        actor_kind=actor[0],
        actor_name=actor[1][:150],
        action=action,
        call_id=call_id,
        agent_name=agent_name[:150],
        tool_name=tool_name[:100],
        # Round-trip through JSON so the hash covers exactly what the database stores.
        data=json.loads(canonical_json(data or {})),
        prev_hash=prev_hash,
    )
    event.hash = event_hash(prev_hash, event.hashed_fields())
    event.save(force_insert=True)
    return event


@transaction.atomic
def record_alone(action: str, **kwargs: Any) -> Event:
    """Append an event that describes no other database change (e.g. a refused request)."""
    return record(action, **kwargs)


@dataclass(frozen=True)
class ChainBreak:
    seq: int
    reason: str


def iter_breaks(chunk_size: int = 10_000) -> Iterator[ChainBreak]:
    """Yield the places where the stored chain does not verify, in order.

    Streams plain tuples (no model instances): verification of a million events
    is bounded by hashing, not by the ORM.
    """
    expected_seq, prev_hash = 1, GENESIS_HASH
    rows = Event.objects.order_by("seq").values_list(*HASHED_FIELDS, "prev_hash", "hash")
    for row in rows.iterator(chunk_size=chunk_size):
        seq, stored_prev, stored_hash = row[0], row[-2], row[-1]
        if seq != expected_seq:
            yield ChainBreak(expected_seq, f"event #{expected_seq} is missing")
        if stored_prev != prev_hash:
            yield ChainBreak(seq, "does not chain to the event before it")
        if event_hash(stored_prev, Event.fields_to_hash(*row[:-2])) != stored_hash:
            yield ChainBreak(seq, "its content does not match its hash")
        expected_seq, prev_hash = seq + 1, stored_hash


def first_break() -> ChainBreak | None:
    """Return the first place the chain fails to verify, or None if it is intact."""
    return next(iter_breaks(), None)
