"""The open types: values whose shape is checked at run time, not by the type checker.

A JSON value's shape is checked where it enters (JSON Schema at intake, the
executor contract on results, `canonical_json` before hashing); a raw SQL row's
columns are whatever its statement selects; a management command's options are
whatever its parser declares; Django's form and admin hooks are typed so by
django-stubs. These aliases are the one place where the product spells `Any`
(pyproject.toml allows it here, and in the agent loop's own agentloop/jsontypes.py).
"""

from __future__ import annotations

from typing import Any, TypeAlias

# A decoded JSON value (null, bool, number, string, array or object).
JSONValue: TypeAlias = Any
JSONObject: TypeAlias = dict[str, JSONValue]

# A value bound into or read from hand-written SQL: the driver adapts it both ways.
SQLValue: TypeAlias = Any
SQLRow: TypeAlias = tuple[SQLValue, ...]

# A parsed command-line option (`BaseCommand.handle(**options)`): its type is the one add_arguments gives it.
OptionValue: TypeAlias = Any

# What Django's form, admin and template hooks hand around untyped (cleaned data, a widget's or template's
# context, the arguments a hook passes on to Django's own): django-stubs types them Any, and overrides keep that.
DjangoValue: TypeAlias = Any
