"""Free-text search helpers for the console's lists (the audit log here, the queue in `approvals`).

ORM only, so the same search runs on PostgreSQL and SQLite; `audit` is the leaf app,
so both lists can import these.
"""

from __future__ import annotations

import json
import re
import uuid
from functools import reduce
from operator import or_

from django.db.models import CharField, Q, TextField, Value
from django.db.models.functions import Cast, Replace
from django.db.models.lookups import IContains, StartsWith

# From this many hex digits on, search text is also taken as the start of a call id (the pages show 8).
CALL_ID_PREFIX_MIN = 4
HEX = re.compile(r"[0-9a-f]+")


def json_string_forms(text: str) -> set[str]:
    """Return `text` as it appears inside a JSON document's text: escaped, non-ASCII as is or as \\u escapes.

    PostgreSQL prints jsonb's non-ASCII as is; SQLite keeps the JSON Django wrote, with \\u escapes.
    """
    return {json.dumps(text, ensure_ascii=False)[1:-1], json.dumps(text)[1:-1]}


def json_contains(field: str, text: str) -> Q:
    """Return a lookup: the JSON column `field` holds `text` somewhere in a key or value (any case)."""
    as_text = Cast(field, TextField())
    return reduce(or_, (Q(IContains(as_text, form)) for form in sorted(json_string_forms(text))))


def call_id_lookups(field: str, text: str) -> list[Q]:
    """Return lookups matching a call id that is `text`, or starts with it (hex digits, hyphens optional)."""
    digits = text.strip().lower().replace("-", "")
    if len(digits) < CALL_ID_PREFIX_MIN or not HEX.fullmatch(digits):
        return []
    if len(digits) == 32:
        return [Q(**{field: uuid.UUID(digits)})]
    # A uuid as text has hyphens on PostgreSQL and none on SQLite: compare without them.
    bare = Replace(Cast(field, CharField()), Value("-"), Value(""))
    return [Q(StartsWith(bare, digits))]
