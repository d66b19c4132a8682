"""Strict JSON parsing for untrusted request bodies.

Python's json module accepts things PostgreSQL or a careful client would not:
NaN and Infinity, duplicate keys (last one silently wins), lone surrogates (jsonb
refuses them), nesting deep enough to exhaust the stack. Each becomes a
`malformed_request` here instead of a 500 later. NUL characters are valid JSON but
cannot be stored: `nul_fields()` finds them so the caller can say which field.
"""

from __future__ import annotations

import json
import math
from typing import NoReturn

from django.conf import settings

from approvals.errors import ApiError
from audit.typealiases import JSONObject, JSONValue


def _reject_constant(name: str) -> NoReturn:
    raise ApiError("malformed_request", f"{name} is not valid JSON; send a finite number.")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ApiError("malformed_request", f"The number {text[:40]} is out of range.")
    return value


def _no_duplicates(pairs: list[tuple[str, JSONValue]]) -> JSONObject:
    result: JSONObject = {}
    for key, value in pairs:
        if key in result:
            raise ApiError("malformed_request", f"The key {key[:80]!r} appears twice in one object.")
        result[key] = value
    return result


def _check_string(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError("malformed_request", "Strings must be valid Unicode (no lone surrogates).") from None


def check_structure(value: JSONValue, max_depth: int) -> None:
    """Refuse nesting deeper than `max_depth` and strings JSON storage can't hold."""
    stack: list[tuple[JSONValue, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            if depth > max_depth:
                raise ApiError("malformed_request", f"JSON nesting is limited to {max_depth} levels.")
            for key, child in item.items():
                _check_string(key)
                stack.append((child, depth + 1))
        elif isinstance(item, list):
            if depth > max_depth:
                raise ApiError("malformed_request", f"JSON nesting is limited to {max_depth} levels.")
            stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, str):
            _check_string(item)


def loads_strict(raw: bytes | str) -> JSONValue:
    """Parse an untrusted JSON document, or raise ApiError('malformed_request')."""
    try:
        value = json.loads(
            raw,
            object_pairs_hook=_no_duplicates,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
        )
    except RecursionError:
        raise ApiError("malformed_request", "JSON nesting is too deep.") from None
    except UnicodeDecodeError:
        raise ApiError("malformed_request", "The body must be UTF-8 encoded JSON.") from None
    except ValueError as exc:  # JSONDecodeError, and integers too long to convert
        raise ApiError("malformed_request", f"The body is not valid JSON: {exc}") from None
    check_structure(value, settings.GATEHOUSE_MAX_JSON_DEPTH)
    return value


def nul_fields(value: JSONValue, path: str = "") -> list[str]:
    """Return the paths of the strings (values or keys) in `value` that contain NUL."""
    found: list[str] = []
    stack: list[tuple[JSONValue, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                child_path = f"{where}.{key}" if where else str(key)
                if "\x00" in key:
                    found.append(child_path.replace("\x00", "\\u0000"))
                stack.append((child, child_path))
        elif isinstance(item, list):
            stack.extend((child, f"{where}[{index}]") for index, child in enumerate(item))
        elif isinstance(item, str) and "\x00" in item:
            found.append(where.replace("\x00", "\\u0000"))
    return sorted(set(found))
