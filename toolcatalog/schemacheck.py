"""Checking a JSON Schema an admin wrote, before any argument is validated against it.

A tool's input schema and every rule condition must be a valid JSON Schema
2020-12 document: the metaschema is checked with format checks (so every regex
compiles), every format named is one Gatehouse really checks, and every `$ref`
resolves inside the schema itself. Nothing is ever fetched over the network: a
remote `$ref` is refused, not retrieved.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import urldefrag, urljoin

from jsonschema import Draft202012Validator, ValidationError
from jsonschema.validators import validator_for
from jsonschema_specifications import REGISTRY as SPECIFICATIONS
from referencing.exceptions import NoSuchAnchor, PointerToNowhere, Unresolvable
from referencing.jsonschema import DRAFT202012

from audit.typealiases import JSONObject, JSONValue
from toolcatalog.schema import OFFLINE_REGISTRY

DIALECT = "https://json-schema.org/draft/2020-12/schema"
SIMPLE_TYPES = ("array", "boolean", "integer", "null", "number", "object", "string")
MAX_PROBLEMS = 10

# Keywords whose value is one subschema, a list of them, or a name → subschema map.
_ONE = (
    "additionalProperties",
    "unevaluatedProperties",
    "items",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
    "unevaluatedItems",
    "contentSchema",
)
_MANY = ("allOf", "anyOf", "oneOf", "prefixItems")
_NAMED = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")

_META = validator_for(Draft202012Validator.META_SCHEMA, default=Draft202012Validator)(
    Draft202012Validator.META_SCHEMA, format_checker=Draft202012Validator.FORMAT_CHECKER
)


def _location(parts: list[str | int]) -> str:
    return "/".join(str(part) for part in parts) or "(top level)"


def _meta_problem(error: ValidationError) -> str:
    """Return one metaschema error as a sentence an admin can act on."""
    where = _location(list(error.absolute_path))
    if error.absolute_path and error.absolute_path[-1] == "type" and error.validator == "anyOf":
        return f"at {where}: unknown type {error.instance!r}; use one of {', '.join(SIMPLE_TYPES)}"
    if error.validator == "format" and error.validator_value == "regex":
        try:
            pattern: JSONValue = error.instance  # set on every error iter_errors yields
            re.compile(pattern)
        except (re.error, TypeError) as exc:
            return f"at {where}: invalid regular expression {error.instance!r}: {exc}"
    return f"at {where}: {error.message}"


def _subschemas(
    schema: JSONValue, path: list[str | int], base: str
) -> Iterator[tuple[list[str | int], JSONObject, str]]:
    """Yield (path, subschema, base URI) for `schema` and every schema nested in it."""
    if not isinstance(schema, dict):
        return
    if isinstance(schema.get("$id"), str):
        base = urljoin(base, schema["$id"])
    yield path, schema, base
    for keyword in _ONE:
        yield from _subschemas(schema.get(keyword), [*path, keyword], base)
    for keyword in _MANY:
        items = schema.get(keyword)
        for index, item in enumerate(items if isinstance(items, list) else []):
            yield from _subschemas(item, [*path, keyword, index], base)
    for keyword in _NAMED:
        named = schema.get(keyword)
        for name, item in (named if isinstance(named, dict) else {}).items():
            yield from _subschemas(item, [*path, keyword, name], base)


def _ref_problems(schema: JSONObject) -> list[str]:
    """Return a problem for every `$ref` that does not resolve inside the schema (or the bundled metaschemas)."""
    resource = DRAFT202012.create_resource(schema)
    root = resource.id() or ""
    # The offline registry retrieves nothing: an unknown URI raises instead of being fetched.
    registry = SPECIFICATIONS.combine(OFFLINE_REGISTRY).with_resource(root, resource)
    resolver = registry.resolver(base_uri=root)
    problems = []
    for path, subschema, base in _subschemas(schema, [], root):
        for keyword in ("$ref", "$dynamicRef"):
            ref = subschema.get(keyword)
            if not isinstance(ref, str):
                continue
            where = _location([*path, keyword])
            try:
                resolver.lookup(urljoin(base, ref) if base else ref)
            except (PointerToNowhere, NoSuchAnchor):
                problems.append(f"at {where}: {ref!r} points to nothing inside this schema")
            except Unresolvable:
                target = urldefrag(urljoin(base, ref))[0]
                problems.append(
                    f"at {where}: remote reference {target!r} refused — Gatehouse never fetches schemas "
                    "over the network; copy the definition under $defs and use '#/$defs/…'"
                )
    return problems


def _format_problems(schema: JSONObject) -> list[str]:
    """Return a problem for every `format` Gatehouse would not check (it would silently accept anything)."""
    known = Draft202012Validator.FORMAT_CHECKER.checkers
    problems = []
    for path, subschema, _ in _subschemas(schema, [], ""):
        name = subschema.get("format")
        if isinstance(name, str) and name not in known:
            problems.append(
                f"at {_location([*path, 'format'])}: format {name!r} is not checked here; "
                f"use a pattern, or one of {', '.join(sorted(known))}"
            )
    return problems


def schema_problems(schema: JSONValue) -> list[str]:
    """Return what is wrong with `schema` as a JSON Schema 2020-12 document ([] if nothing)."""
    if isinstance(schema, bool):
        return []
    if not isinstance(schema, dict):
        return ["a schema must be a JSON object (or true/false)"]
    dialect = schema.get("$schema")
    if dialect is not None and (not isinstance(dialect, str) or dialect.rstrip("#") != DIALECT):
        return [f"$schema must be {DIALECT!r} (or left out): only JSON Schema 2020-12 is supported"]
    errors = sorted(_META.iter_errors(schema), key=lambda e: [str(p) for p in e.absolute_path])
    problems = [_meta_problem(error) for error in errors]
    if not problems:
        # Only a schema the metaschema accepts has refs and formats worth looking at.
        problems = _ref_problems(schema) + _format_problems(schema)
    return problems[:MAX_PROBLEMS]


def input_schema_problems(schema: JSONValue) -> list[str]:
    """Return what is wrong with `schema` as a tool's input schema: a valid schema of an object."""
    problems = schema_problems(schema)
    if not problems and (not isinstance(schema, dict) or schema.get("type") != "object"):
        problems = ['a tool\'s arguments are a JSON object: the input schema needs "type": "object"']
    return problems
