"""How an event is chained.

Two forms, told apart by the event's `digest` column:

- sealed form (every event the sequencer seals): `digest` is the SHA-256 (hex) of the
  canonical JSON (audit/canonical.py, RFC 8785) of the event's hashed fields but
  `seq`, computed when the event is inserted. Its `hash` is the SHA-256 (hex) of the
  ASCII text `prev_hash + "\n" + seq + "\n" + digest`, seq in decimal digits
  (`sealed_hash`). The text starts with 64 hex digits and a newline, where the
  earlier form's has `{`: no text is both forms'.
- chained form (events written before the sequencer; `digest` NULL): `hash` is the
  SHA-256 (hex) of `prev_hash` followed by the canonical JSON of every hashed field,
  seq included (`event_hash`).

The first event's `prev_hash` is 64 zeros; each later event's is its predecessor's `hash`.
"""

from __future__ import annotations

import hashlib

from audit.canonical import canonical_json

GENESIS_HASH = "0" * 64

# created_at exactly as the hash covers it, written by PostgreSQL: Python's isoformat() of a UTC
# datetime (no fraction when it is zero). The walk rebuilds this text from created_at's plain text
# (audit.chain._stamp); tests hold the two to be the same.
CREATED_TEXT_SQL = (
    "to_char({0} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS') || CASE WHEN extract(microseconds FROM {0})::bigint"
    " %% 1000000 = 0 THEN '' ELSE to_char({0} AT TIME ZONE 'UTC', '.US') END || '+00:00'"
)


def event_hash(prev_hash: str, fields: dict[str, object]) -> str:
    """Return the hash that chains `fields` onto `prev_hash`."""
    return chained(prev_hash, canonical_json(fields))


def chained(prev_hash: str, text: str) -> str:
    return hashlib.sha256((prev_hash + text).encode("utf-8")).hexdigest()


def content_digest(content: dict[str, object]) -> str:
    """Return the digest of an event's content (its hashed fields but seq): SHA-256 of the canonical JSON."""
    return hashlib.sha256(canonical_json(content).encode("utf-8")).hexdigest()


def sealed_hash(prev_hash: str, seq: int, digest: str) -> str:
    """Return the hash that seals the event of `digest` at `seq` after `prev_hash` (the sealed form)."""
    return hashlib.sha256(f"{prev_hash}\n{seq}\n{digest}".encode("ascii")).hexdigest()
