"""Argument validation that reports every error in a form a model can act on.

One compiled validator per tool version, kept: building a validator costs far more
than using one, and a tool's schema changes only with its version.
"""

from __future__ import annotations

from collections.abc import Callable

from jsonschema import Draft202012Validator, ValidationError
from referencing import Registry

from audit.typealiases import JSONObject, JSONValue
from toolcatalog.sensitive import sensitive_paths

FieldError = JSONObject

# An empty registry retrieves nothing: a `$ref` outside the schema fails instead of
# being fetched over the network (jsonschema's default registry would fetch it).
OFFLINE_REGISTRY: Registry[JSONValue] = Registry()


def compile_validator(schema: JSONObject) -> Draft202012Validator:
    """Return a validator for `schema`, checking formats too."""
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER, registry=OFFLINE_REGISTRY)


def _path(parts: list[str | int]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _join(base: list[str | int], name: str | int) -> str:
    return _path([*base, name])


def _known_properties(schema: JSONValue) -> list[str]:
    return sorted((schema.get("properties") or {}).keys())


def _describe(error: ValidationError, hide_value: bool = False) -> list[FieldError]:
    """Turn one jsonschema error into one or more `{field, problem, accepted_values?}`.

    `hide_value`: the failing value holds a sensitive argument, so no message may quote it.
    """
    base = list(error.absolute_path)
    # An error from iter_errors always has these set (the stubs also allow them unset).
    keyword = str(error.validator)
    expected: JSONValue = error.validator_value
    instance: JSONValue = error.instance
    if keyword == "required" and isinstance(instance, dict):
        return [{"field": _join(base, name), "problem": "is required"} for name in expected if name not in instance]
    if keyword in {"additionalProperties", "unevaluatedProperties"} and isinstance(instance, dict):
        known = set(_known_properties(error.schema))
        extras = [name for name in instance if name not in known]
        return [
            {
                "field": _join(base, name),
                "problem": "is not an accepted argument",
                "accepted_values": _known_properties(error.schema),
            }
            for name in extras
        ]
    field = _path(base) or "arguments"
    if keyword == "enum":
        return [{"field": field, "problem": "must be one of the accepted values", "accepted_values": list(expected)}]
    if keyword == "const":
        return [{"field": field, "problem": "must be exactly the accepted value", "accepted_values": [expected]}]
    describe = _PROBLEMS.get(keyword, _value_free_problem if hide_value else _default_problem)
    return [{"field": field, "problem": describe(expected, error)}]


def _default_problem(expected: JSONValue, error: ValidationError) -> str:
    return error.message


def _value_free_problem(expected: JSONValue, error: ValidationError) -> str:
    # jsonschema's own message quotes the value, and this one holds a secret (toolcatalog.sensitive).
    return f"does not satisfy the schema's '{error.validator}' (the value is sensitive, so it is not quoted)"


def _holds_secret(path: tuple[str | int, ...], secrets: list[tuple[str | int, ...]]) -> bool:
    """Return whether the value at `path` is, is inside, or contains a sensitive value."""
    return any(path[: len(secret)] == secret or secret[: len(path)] == path for secret in secrets)


def _type_problem(expected: JSONValue, error: ValidationError) -> str:
    names = expected if isinstance(expected, list) else [expected]
    return "must be of type " + " or ".join(str(name) for name in names)


_PROBLEMS: dict[str, Callable[[JSONValue, ValidationError], str]] = {
    "type": _type_problem,
    "pattern": lambda expected, e: f"must match the pattern {expected}",
    "minimum": lambda expected, e: f"must be greater than or equal to {expected}",
    "maximum": lambda expected, e: f"must be less than or equal to {expected}",
    "exclusiveMinimum": lambda expected, e: f"must be greater than {expected}",
    "exclusiveMaximum": lambda expected, e: f"must be less than {expected}",
    "minLength": lambda expected, e: f"must be at least {expected} characters long",
    "maxLength": lambda expected, e: f"must be at most {expected} characters long",
    "minItems": lambda expected, e: f"must have at least {expected} items",
    "maxItems": lambda expected, e: f"must have at most {expected} items",
    "uniqueItems": lambda expected, e: "must not contain duplicate items",
    "format": lambda expected, e: f"must be a valid {expected}",
    "multipleOf": lambda expected, e: f"must be a multiple of {expected}",
}


def argument_errors(validator: Draft202012Validator, arguments: JSONValue) -> list[FieldError]:
    """Return every problem with `arguments`, sorted by field, or [] if they are valid."""
    problems: dict[tuple[str, str], FieldError] = {}
    secrets = sensitive_paths(validator.schema, arguments)
    for error in validator.iter_errors(arguments):
        # One jsonschema error per missing property, each listing them all: keep one of each.
        for problem in _describe(error, hide_value=_holds_secret(tuple(error.absolute_path), secrets)):
            problems.setdefault((problem["field"], problem["problem"]), problem)
    return [problems[key] for key in sorted(problems)]
