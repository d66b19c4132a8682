"""`canonical_json` writes with orjson where orjson's bytes are RFC 8785's: the text, and so every hash, is unchanged.

Each case compares `canonical_json` with `rfc8785_text` (the RFC 8785 walk alone, what
every digest in the audit chain was written with before), on values that take the
fast path and values that must not (floats, non-ASCII keys, huge integers, datetimes).
"""

from __future__ import annotations

import datetime as dt
import enum
import hashlib
import uuid
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from approvals.states import Status
from audit.canonical import _NOT_READY, _orjson_ready, canonical_json, rfc8785_text
from audit.hashing import content_digest
from audit.models import Event

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
KEYS = st.text(max_size=6) | st.text(alphabet=st.characters(max_codepoint=127), max_size=6)
VALUES = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4), max_leaves=25
)


class Colour(str, enum.Enum):  # noqa: UP042 — the mixin whose __str__ is not its value
    RED = "red"


class Size(enum.IntEnum):
    LARGE = 3


@settings(max_examples=3000, deadline=None)
@given(VALUES)
def test_canonical_json_is_the_rfc8785_walks_text_for_any_json_value(value: object) -> None:
    try:
        expected = rfc8785_text(value)
    except ValueError:  # a lone surrogate: both refuse it
        with pytest.raises(ValueError):
            canonical_json(value)
        return
    assert canonical_json(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        {"b": 1, "a": [True, None, 'x\u2028\x7f\x00"\\'], "": {}},
        {"é": 1, "z": 2},  # a non-ASCII key: the walk sorts it
        {"\U0001f600": 1, "\uff61": 2},  # UTF-16 order differs from code point order here
        {"n": 100.0, "m": 1e21, "k": 1e-7},  # floats: the walk writes them
        {"big": 2**53 + 1, "edge": 2**53 - 1, "neg": -(2**53 - 1)},
        {"at": dt.datetime(2026, 12, 4, 15, 0, 0, 123456, tzinfo=dt.UTC), "id": uuid.UUID(int=7)},
        {"d": Decimal("1.50"), "t": (1, "two"), "day": dt.date(2026, 12, 4), "span": dt.timedelta(seconds=90)},
        {"status": Status.PENDING_APPROVAL, "colour": Colour.RED, "size": Size.LARGE},
        {1: "an integer key"},
        "\ud800",  # a lone surrogate
    ],
)
def test_canonical_json_matches_the_walk_on_edge_values(value: object) -> None:
    try:
        expected = rfc8785_text(value)  # type: ignore[arg-type]
    except ValueError:
        with pytest.raises(ValueError):
            canonical_json(value)  # type: ignore[arg-type]
        return
    assert canonical_json(value) == expected  # type: ignore[arg-type]


def test_an_events_content_takes_the_orjson_path_with_the_same_digest() -> None:
    event = Event(
        created_at=dt.datetime(2026, 12, 4, 15, 0, 0, 5, tzinfo=dt.UTC),
        actor_kind="agent",
        actor_name="support-agent",
        action="call.proposed",
        call_id=uuid.uuid4(),
        agent_name="support-agent",
        tool_name="emitir_estorno",
        data={"status": Status.PENDING_APPROVAL, "risk_tier": 2, "arguments": {"valor_centavos": 25000}},
    )
    content = event.content_fields()
    assert _orjson_ready(content) is not _NOT_READY
    assert content_digest(content) == hashlib.sha256(rfc8785_text(content).encode()).hexdigest()
