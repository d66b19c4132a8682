"""Sensitive arguments: the properties a tool's schema marks as secrets, and how their values are kept from view.

A property is sensitive when its schema says `"x-gatehouse-sensitive": true` or
`"writeOnly": true`, at any depth (object properties, array items, allOf/anyOf/oneOf).
A call stores its arguments *redacted*: each sensitive value replaced by its keyed
hash (`hmac-sha256:…`, vault.hashing), so the stored arguments, their hash and every
audit event still bind the exact value (an approval of one value is not an approval of
another) while nothing stored reveals it. The real values are kept apart, encrypted
(approvals.sensitive), for the executor alone.

Whatever shows arguments to a person or another system shows `mask_arguments()`:
`•••• (set)`, or `•••• (changed)` beside the arguments they replace.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from audit.canonical import canonical_json
from audit.typealiases import JSONObject, JSONValue
from toolcatalog.models import Tool
from vault.hashing import keyed_hash
from vault.secrets import MASK, MASK_CHANGED

KEYWORD = "x-gatehouse-sensitive"
HASH_PREFIX = "hmac-sha256:"
ANY_ITEM = "*"
COMBINATORS = ("allOf", "anyOf", "oneOf")

# A place in the arguments: object keys and array indexes from the top.
Path = tuple[str | int, ...]
# A place in the schema: property names, ANY_ITEM for an array's items.
Pattern = tuple[str, ...]
MISSING = object()


def is_sensitive(spec: JSONValue) -> bool:
    """Return whether one property's schema marks its value as a secret."""
    return isinstance(spec, Mapping) and (spec.get(KEYWORD) is True or spec.get("writeOnly") is True)


def sensitive_patterns(schema: JSONValue) -> list[Pattern]:
    """Return where a schema's sensitive properties are, each once."""
    return list(dict.fromkeys(_patterns(schema, ())))


def _patterns(schema: JSONValue, prefix: Pattern) -> Iterator[Pattern]:
    if not isinstance(schema, Mapping):
        return
    properties = schema.get("properties")
    children = list(properties.items()) if isinstance(properties, Mapping) else []
    if isinstance(schema.get("items"), Mapping):
        children.append((ANY_ITEM, schema["items"]))
    for name, spec in children:
        if is_sensitive(spec):
            yield (*prefix, name)
        else:
            yield from _patterns(spec, (*prefix, name))
    for keyword in COMBINATORS:
        for branch in schema.get(keyword) or []:
            yield from _patterns(branch, prefix)


def has_sensitive(tool: Tool) -> bool:
    """Return whether any property of the tool's input schema is sensitive."""
    return bool(sensitive_patterns(tool.input_schema))


def sensitive_paths(schema: JSONValue, arguments: JSONValue) -> list[Path]:
    """Return the places in `arguments` that hold a sensitive value, as the schema marks them."""
    return [path for pattern in sensitive_patterns(schema) for path in _locate(arguments, pattern)]


def _locate(value: JSONValue, pattern: Pattern) -> Iterator[Path]:
    if not pattern:
        yield ()
        return
    head, rest = pattern[0], pattern[1:]
    if head == ANY_ITEM and isinstance(value, list):
        for index, item in enumerate(value):
            yield from ((index, *path) for path in _locate(item, rest))
    elif isinstance(value, Mapping) and head in value:
        yield from ((head, *path) for path in _locate(value[head], rest))


def value_at(value: JSONValue, path: Path) -> JSONValue:
    """Return what `value` holds at `path`, or MISSING."""
    for step in path:
        in_object = isinstance(value, Mapping) and isinstance(step, str) and step in value
        in_array = isinstance(value, list) and isinstance(step, int) and 0 <= step < len(value)
        if not (in_object or in_array):
            return MISSING
        value = value[step]
    return value


def with_value(value: JSONValue, path: Path, new: JSONValue) -> JSONValue:
    """Return a copy of `value` holding `new` at `path` (the original is left as it was)."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, Mapping) and isinstance(head, str):
        return {**value, head: with_value(value.get(head), rest, new)}
    if isinstance(value, list) and isinstance(head, int) and 0 <= head < len(value):
        return [*value[:head], with_value(value[head], rest, new), *value[head + 1 :]]
    return value


def pointer(path: Path) -> str:
    """Return `path` as a JSON Pointer (RFC 6901)."""
    return "".join("/" + str(step).replace("~", "~0").replace("/", "~1") for step in path)


def parse_pointer(text: str, value: JSONValue) -> Path:
    """Return the path a JSON Pointer names in `value` (array indexes as integers)."""
    path: list[str | int] = []
    for token in text.split("/")[1:]:
        step = token.replace("~1", "/").replace("~0", "~")
        container = value_at(value, tuple(path))
        path.append(int(step) if isinstance(container, list) and step.isdigit() else step)
    return tuple(path)


def hashed(value: JSONValue) -> str:
    """Return what a sensitive value is stored as: its keyed hash (equal values, equal hashes)."""
    return HASH_PREFIX + keyed_hash(canonical_json(value).encode())


def redact(schema: JSONValue, arguments: JSONObject) -> tuple[JSONObject, JSONObject]:
    """Return (the arguments with each sensitive value replaced by its keyed hash, {JSON Pointer: real value})."""
    redacted: JSONValue = arguments
    values: JSONObject = {}
    for path in sensitive_paths(schema, arguments):
        real = value_at(arguments, path)
        values[pointer(path)] = real
        redacted = with_value(redacted, path, hashed(real))
    return redacted, values


def reveal(redacted: JSONObject, values: Mapping[str, JSONValue]) -> JSONObject:
    """Return the real arguments: `redacted` with the kept values put back where they were taken from."""
    real: JSONValue = redacted
    for text, value in values.items():
        real = with_value(real, parse_pointer(text, real), value)
    return dict(real)


def mask_arguments(tool: Tool, arguments: JSONValue, before: JSONValue = None) -> JSONValue:
    """Return `arguments` as a person or another system may read them: each sensitive value as `•••• (set)`.

    With `before` (the arguments these replace), a value that differs from the one at the same
    place there reads `•••• (changed)`. Works on real and on stored (redacted) arguments alike.
    """
    return mask_with_schema(tool.input_schema, arguments, before)


def mask_with_schema(schema: JSONValue, arguments: JSONValue, before: JSONValue = None) -> JSONValue:
    """`mask_arguments` for a schema rather than a tool."""
    masked = arguments
    for path in sensitive_paths(schema, arguments):
        previous = value_at(before, path) if before is not None else MISSING
        same = before is None or previous == value_at(arguments, path)
        masked = with_value(masked, path, MASK if same else MASK_CHANGED)
    return masked


def scrub(value: JSONValue, secrets: list[str]) -> JSONValue:
    """Return `value` with every string that contains one of `secrets` replaced by the mask.

    For what a downstream answers (a result, an error): it may echo what it received.
    """
    if not secrets:
        return value
    if isinstance(value, str):
        return MASK if any(secret in value for secret in secrets) else value
    if isinstance(value, list):
        return [scrub(item, secrets) for item in value]
    if isinstance(value, Mapping):
        return {key: scrub(item, secrets) for key, item in value.items()}
    return value
