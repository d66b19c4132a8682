"""The static types of JSON values the agent loop sends and receives.

A model's reply, a tool's arguments and Gatehouse's answers are JSON whose shape
is checked where the loop reads them, not by the type checker, so their static
type stays open. This is the one module of the loop that spells `Any`
(pyproject.toml allows it here only). The loop imports no Gatehouse app, so it
keeps its own aliases rather than audit's.
"""

from __future__ import annotations

from typing import Any, TypeAlias

# A decoded JSON value (null, bool, number, string, array or object).
JSONValue: TypeAlias = Any
JSONObject: TypeAlias = dict[str, JSONValue]
