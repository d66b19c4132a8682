"""The one canonical JSON form: RFC 8785 (JCS), for every hash and every comparison of JSON values.

The arguments hash an approval binds, the idempotency request hash, the audit
chain's content hash and the worker's binding check all hash `canonical_json`.

Numbers are why it matters. A JSON number is one IEEE 754 double (RFC 8785
§3.2.2.3), written in its shortest form: `100`, `100.0` and `1E2` are one number,
and `1e16` is written `10000000000000000`. PostgreSQL's jsonb keeps a number's
decimal value but rewrites its text (`1e+16` comes back as `10000000000000000`,
`1e-7` as `0.0000001`), and Python reads the first back as an int: both denote the
same double, so the canonical text, and every hash of it, survives the round trip.

An integer no double holds exactly (9007199254740993) is outside what JCS covers:
read as a double it would share a text with its neighbour. Here it is written in
its exact digits instead (no double's text is such digits, so no two values share
one), so the audit chain can record whatever a downstream answered; intake refuses
it in arguments (`inexact_numbers`), because an I-JSON reader downstream would read
another number than the reviewer saw.

This module is a leaf: it imports no Gatehouse app, and every app imports it.
"""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal

import orjson
import rfc8785
from django.core.serializers.json import DjangoJSONEncoder

from audit.typealiases import JSONValue

# The integers a double holds exactly, each with no other integer rounding to it (I-JSON).
SAFE_INTEGER = 2**53 - 1


def canonical_json(value: JSONValue) -> str:
    """Return the canonical text of a JSON value: RFC 8785, integers beyond doubles in exact digits.

    Values JSON has no type for (datetimes, UUIDs, decimals) are taken as Django's
    JSON encoder writes them. Raises ValueError for NaN, infinities and lone surrogates.
    """
    try:
        plain = _orjson_ready(value)
    except RecursionError:  # nested deeper than Python recurses: the walk below raises as it always did
        plain = _NOT_READY
    if plain is not _NOT_READY:
        try:
            return orjson.dumps(plain, option=orjson.OPT_SORT_KEYS).decode()
        except orjson.JSONEncodeError:  # a lone surrogate, or nesting deeper than orjson goes: the walk says why
            pass
    return rfc8785_text(value)


def rfc8785_text(value: JSONValue) -> str:
    """Return `canonical_json`'s text by the RFC 8785 walk alone (what orjson's text is held to)."""
    try:
        return rfc8785.dumps(value).decode()
    except rfc8785.IntegerDomainError:  # a rare integer beyond ±(2**53 − 1): the slower exact walk
        return _dumps(_plain(value))
    except rfc8785.CanonicalizationError:
        plain = _plain(value)
        if plain == value:  # nothing to convert: the value itself is not JSON (NaN, a lone surrogate)
            raise
        return rfc8785_text(plain)


# Where orjson writes exactly RFC 8785's bytes: strings (every code point escaped alike), integers
# doubles hold exactly, true/false/null, arrays, and objects whose keys are ASCII (so sorting by
# UTF-16 units, as RFC 8785 does, and by orjson's order agree). Floats are not: the two write
# some differently (100.0, 1e21). Anything else takes `rfc8785_text`.
_NOT_READY = object()


def _orjson_ready(value: object) -> object:
    """Return `value` as plain JSON types orjson writes as RFC 8785 does, or `_NOT_READY`.

    Converted as the walk would take them: subclasses as their base type's value
    (rfc8785 writes a `str` enum's text, an `int` enum's number), tuples as arrays,
    and a value JSON has no type for as Django's JSON encoder writes it, if that is text.
    """
    if value is None or type(value) is str or type(value) is bool:
        return value
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value) if -SAFE_INTEGER <= value <= SAFE_INTEGER else _NOT_READY
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, dict):
        return _ready_object(value)
    if isinstance(value, list | tuple):
        items = [_orjson_ready(item) for item in value]
        return _NOT_READY if any(item is _NOT_READY for item in items) else items
    if isinstance(value, float):
        return _NOT_READY
    text = _django_text(value)
    return text if type(text) is str else _NOT_READY


def _ready_object(value: dict[object, object]) -> object:
    ready: dict[str, object] = {}
    for key, item in value.items():
        if type(key) is not str or not key.isascii():
            return _NOT_READY
        plain = _orjson_ready(item)
        if plain is _NOT_READY:
            return _NOT_READY
        ready[key] = plain
    return ready


def _django_text(value: object) -> object:
    """Return what Django's JSON encoder writes for a value JSON has no type for (None if it has no form)."""
    try:
        return DjangoJSONEncoder().default(value)
    except (TypeError, ValueError):
        return None


def canonical_hash(value: JSONValue) -> str:
    """Return the SHA-256 (hex) of `value`'s canonical text."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def normalized(value: JSONValue) -> JSONValue:
    """Return `value` as its canonical text reads back: integral numbers as int, others as float.

    `100.0` becomes 100 and `1e16` becomes 10000000000000000, so a value is stored,
    shown and sent as the number its hash covers; it also reads back from
    PostgreSQL's jsonb and SQLite equal to itself, type and all.
    """
    return json.loads(canonical_json(value), parse_float=_number)


def inexact_numbers(value: JSONValue, path: str = "") -> list[str]:
    """Return the paths (`a.b[2]`) of the integers in `value` that no double holds exactly."""
    found: list[str] = []
    stack: list[tuple[JSONValue, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, dict):
            stack.extend((child, f"{where}.{key}" if where else str(key)) for key, child in item.items())
        elif isinstance(item, list):
            stack.extend((child, f"{where}[{index}]") for index, child in enumerate(item))
        elif isinstance(item, int) and not isinstance(item, bool) and _double_text(item) is None:
            found.append(where)
    return sorted(found)


def _plain(value: JSONValue) -> JSONValue:
    """Return `value` with what JSON has no type for written as Django's JSON encoder writes it."""
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder, allow_nan=False))


def _number(text: str) -> int | float:
    # The canonical text of an integral double: "1e+21", "1.5e+300" (shorter ones have no "." or "e").
    exact = Decimal(text)
    return int(exact) if exact == exact.to_integral_value() else float(text)


def _dumps(value: JSONValue) -> str:
    """Return RFC 8785's text of `value`, writing each integer by `_integer`."""
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda item: item[0].encode("utf-16be"))  # RFC 8785 §3.2.3
        return "{" + ",".join(f"{rfc8785.dumps(key).decode()}:{_dumps(item)}" for key, item in items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_dumps(item) for item in value) + "]"
    if isinstance(value, int) and not isinstance(value, bool):
        return _integer(value)
    return rfc8785.dumps(value).decode()


def _integer(value: int) -> str:
    """Return an integer as RFC 8785 writes the double it is, or its exact digits when no double is it."""
    text = _double_text(value)
    return text if text is not None else str(value)


def _double_text(value: int) -> str | None:
    """Return RFC 8785's text of the double that is exactly `value`, or None if no double is."""
    if -SAFE_INTEGER <= value <= SAFE_INTEGER:
        return str(value)
    try:
        text = rfc8785.dumps(float(value)).decode()
    except OverflowError:
        return None
    # Exact comparison: 10**23 is the double written "1e+23"; 2**53 + 1 is no double.
    return text if Decimal(text) == value else None
