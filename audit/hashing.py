"""How an event is chained: the hash that covers the previous event's hash and its own canonical text."""

from __future__ import annotations

import hashlib

from audit.canonical import canonical_json

GENESIS_HASH = "0" * 64

# created_at exactly as the hash covers it: Python's isoformat() of a UTC datetime (no
# fraction when it is zero). PostgreSQL's append hashes this text; the walkers read it back.
CREATED_TEXT_SQL = (
    "to_char({0} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS') || CASE WHEN extract(microseconds FROM {0})::bigint"
    " %% 1000000 = 0 THEN '' ELSE to_char({0} AT TIME ZONE 'UTC', '.US') END || '+00:00'"
)


def event_hash(prev_hash: str, fields: dict[str, object]) -> str:
    """Return the hash that chains `fields` onto `prev_hash`."""
    return chained(prev_hash, canonical_json(fields))


def chained(prev_hash: str, text: str) -> str:
    return hashlib.sha256((prev_hash + text).encode("utf-8")).hexdigest()
