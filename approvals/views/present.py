"""How the console shows calls to people: money, arguments, diffs, timelines.

Pure functions over plain values (no queries), so templates stay dumb and these
rules are tested without a browser.
"""

from __future__ import annotations

import json
import re
import unicodedata
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from approvals.models import ToolCall
from audit.typealiases import JSONObject, JSONValue

# Arguments whose names end like this hold money; they are what a reviewer reads first.
MONEY_CENTS_SUFFIX = "_centavos"
MONEY_UNITS_SUFFIX = "_brl"
# Audit data keys that are long or repeated elsewhere on the page.
ISO_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}")
NOISY_EVENT_KEYS = frozenset({"arguments", "before", "after", "from", "justification", "risk_reasons", "preview"})
# Characters that change what text looks like without looking like anything themselves: format
# (bidi overrides, zero-width), control, separator, private-use, unassigned and surrogate code points.
HIDDEN_CATEGORIES = frozenset({"Cf", "Cc", "Cs", "Co", "Cn", "Zl", "Zp"})
# Line breaks and tabs in prose are what they seem.
PLAIN_CONTROLS = frozenset("\n\t")
# Not format characters, yet blank or mistaken for an ordinary space or letter.
LOOKALIKE_BLANKS = frozenset(
    "\u00a0\u034f\u115f\u1160\u1680\u17b4\u17b5\u180b\u180c\u180d\u180f\u2000\u2001\u2002\u2003"
    "\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f\u205f\u2800\u3000\u3164\uffa0"
)


def format_brl(cents: int) -> str:
    """Return an amount in cents as Brazilian reais: 800000 → "R$ 8.000,00"."""
    sign = "-" if cents < 0 else ""
    units, rest = divmod(abs(int(cents)), 100)
    return f"{sign}R$ {units:,}".replace(",", ".") + f",{rest:02d}"


def _is_number(value: JSONValue) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def format_value(name: str, value: JSONValue) -> str:
    """Return one argument or resource field as a person reads it."""
    if _is_number(value) and name.endswith(MONEY_CENTS_SUFFIX):
        return format_brl(int(value))
    if _is_number(value) and name.endswith(MONEY_UNITS_SUFFIX):
        return format_brl(round(value * 100))
    if value is None:
        return "—"
    if isinstance(value, str) and ISO_DATETIME.match(value):
        return _readable_datetime(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list) and all(isinstance(item, str | int | float) for item in value):
        return ", ".join(str(item) for item in value)
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return str(value)


def _readable_datetime(text: str) -> str:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return text
    suffix = " UTC" if moment.utcoffset() == timedelta(0) else ""
    return moment.strftime("%Y-%m-%d %H:%M:%S") + suffix


def headline(arguments: JSONValue, resource_argument: str = "") -> tuple[str, str] | None:
    """Return the argument that matters most as (name, formatted value): money first, then the resource."""
    if not isinstance(arguments, Mapping):
        return None
    for name, value in arguments.items():
        if _is_number(value) and name.endswith((MONEY_CENTS_SUFFIX, MONEY_UNITS_SUFFIX)):
            return name, format_value(name, value)
    if resource_argument and resource_argument in arguments:
        return resource_argument, format_value(resource_argument, arguments[resource_argument])
    return None


def raw_text(value: JSONValue) -> str:
    """Return a value as the agent sent it (strings without JSON quotes)."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


@dataclass(frozen=True)
class ArgumentRow:
    name: str
    value: str
    raw: str
    description: str
    required: bool


def argument_rows(arguments: Mapping[str, JSONValue], schema: Mapping[str, JSONValue]) -> list[ArgumentRow]:
    """Return the real arguments in schema order, each with the schema's description as a hint."""
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    names = [name for name in properties if name in arguments] + [name for name in arguments if name not in properties]
    return [
        ArgumentRow(
            name=name,
            value=format_value(name, arguments[name]),
            raw=raw_text(arguments[name]),
            description=str((properties.get(name) or {}).get("description", "")),
            required=name in required,
        )
        for name in names
    ]


@dataclass(frozen=True)
class DiffRow:
    name: str
    before: str
    after: str
    change: str  # "same", "changed", "added" or "removed"

    @property
    def changed(self) -> bool:
        return self.change != "same"


def flatten(value: JSONValue, prefix: str = "") -> JSONObject:
    """Return nested mappings as one level of dotted names (lists stay whole)."""
    if not isinstance(value, Mapping):
        return {prefix or "value": value} if value is not None else {}
    flat: JSONObject = {}
    for key, item in value.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        flat.update(flatten(item, name) if isinstance(item, Mapping) and item else {name: item})
    return flat


def diff_rows(before: JSONValue, after: JSONValue) -> list[DiffRow]:
    """Return a field-by-field before → after comparison of two JSON objects."""
    old, new = flatten(before), flatten(after)
    rows = []
    for name in list(old) + [name for name in new if name not in old]:
        if name not in new:
            change = "removed"
        elif name not in old:
            change = "added"
        else:
            change = "same" if old[name] == new[name] else "changed"
        before_text = format_value(_leaf(name), old[name]) if name in old else ""
        after_text = format_value(_leaf(name), new[name]) if name in new else ""
        rows.append(DiffRow(name, before_text, after_text, change))
    # What changed is what a reviewer must read; the stored key order (jsonb's) means nothing.
    return sorted(rows, key=lambda row: not row.changed)


def _leaf(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def compact_duration(delta: timedelta) -> str:
    """Return a duration the way a queue reads it: "45s", "12m", "3h 05m", "2d 4h"."""
    seconds = max(0, int(delta.total_seconds()))
    days, seconds = divmod(seconds, 86400)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m"
    return f"{seconds}s"


def seconds_until(moment: datetime | None, now: datetime) -> int | None:
    """Return whole seconds from `now` until `moment` (negative once passed), or None."""
    return None if moment is None else int((moment - now).total_seconds())


def event_summary(data: Mapping[str, JSONValue], limit: int = 4) -> list[tuple[str, str]]:
    """Return the few audit data fields worth a line in a timeline, formatted."""
    items = []
    for key, value in data.items():
        if key in NOISY_EVENT_KEYS or value in (None, "", [], {}):
            continue
        text = format_value(key, value)
        if key.endswith("hash") and isinstance(value, str):
            text = value[:12] + "…"
        items.append((key, text if len(text) <= 120 else text[:119] + "…"))
    return items[:limit]


def count_approvals(
    decisions: Iterable[tuple[uuid.UUID, str, int, str]], calls: Iterable[ToolCall]
) -> dict[uuid.UUID, int]:
    """Return distinct approvers per call, counting only approvals of its current arguments and version.

    `decisions` are (call_id, arguments_hash, tool_version, reviewer_name) of approve decisions.
    """
    current = {call.pk: (call.arguments_hash, call.tool_version) for call in calls}
    approvers: dict[uuid.UUID, set[str]] = {pk: set() for pk in current}
    for call_id, args_hash, version, reviewer in decisions:
        if current.get(call_id) == (args_hash, version):
            approvers[call_id].add(reviewer)
    return {pk: len(names) for pk, names in approvers.items()}


def is_hidden(char: str) -> bool:
    """Return whether `char` would be invisible or pass for something else in a reviewer's page."""
    if char in PLAIN_CONTROLS:
        return False
    if char in LOOKALIKE_BLANKS or unicodedata.category(char) in HIDDEN_CATEGORIES:
        return True
    # Variation selectors (U+FE00–FE0F, U+E0100–E01EF) restyle the character before them.
    return "\ufe00" <= char <= "\ufe0f" or "\U000e0100" <= char <= "\U000e01ef"


def codepoint_label(char: str) -> str:
    """Return how a hidden character is shown instead of itself: "⟨U+202E⟩"."""
    return f"⟨U+{ord(char):04X}⟩"


def codepoint_name(char: str) -> str:
    """Return a hidden character's Unicode name, for a tooltip ("RIGHT-TO-LEFT OVERRIDE")."""
    return unicodedata.name(char, "unnamed character")


def reveal_segments(text: str) -> Iterator[tuple[str, bool]]:
    """Split `text` into (chunk, hidden) pieces: runs of ordinary text, and each hidden character alone."""
    start = 0
    for index, char in enumerate(text):
        if is_hidden(char):
            if index > start:
                yield text[start:index], False
            yield char, True
            start = index + 1
    if start < len(text):
        yield text[start:], False


def reveal_plain(text: str) -> str:
    """Return `text` with every hidden character spelled out, for places that take no markup (a title)."""
    return "".join(codepoint_label(chunk) if hidden else chunk for chunk, hidden in reveal_segments(text))


def hidden_characters(value: JSONValue, path: str = "") -> list[tuple[str, list[str]]]:
    """Return (field path, ["U+202E", …]) for every key or string in a JSON value that holds hidden characters."""
    found: list[tuple[str, list[str]]] = []
    if isinstance(value, str):
        codes = sorted({f"U+{ord(char):04X}" for char in value if is_hidden(char)})
        if codes:
            found.append((path or "value", codes))
    elif isinstance(value, Mapping):
        for key, item in value.items():
            name = f"{path}.{key}" if path else str(key)
            found += hidden_characters(str(key), name) + hidden_characters(item, name)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += hidden_characters(item, f"{path}[{index}]")
    return found


# What a call's page says of its arguments and its dry run, by state: a finished call says what
# ran and what happened, not what "will" run.
ARGUMENTS_CAPTIONS = {
    "pending_approval": "exactly what will run",
    "approved": "exactly what will run",
    "executing": "what is running",
    "succeeded": "what ran",
    "failed": "what ran",
    "needs_reconciliation": "what ran",
}
NEVER_RAN_CAPTION = "what the agent asked for; it never ran"
STATUS_SENTENCES = {
    "refused": "The call was refused before review; it never ran.",
    "pending_approval": "The call waits for a decision.",
    "rejected": "A reviewer rejected the call; it never ran.",
    "expired": "Nobody decided in time: the call expired and never ran.",
    "approved": "The call is approved and waits for a worker.",
    "executing": "The call is running.",
    "succeeded": "The call ran and succeeded.",
    "needs_reconciliation": "The call ran, but its effect could not be verified: reconcile it downstream.",
    "failed": "The call ran and failed.",
}


def foretells_refusal(would_fail: JSONValue) -> bool:
    """Return whether a dry run's `would_fail` (as the database hands back JSON text) predicts a refusal."""
    return would_fail not in (None, "", "false", "0", 0, False)


def arguments_caption(status: str) -> str:
    """Return how the arguments are introduced for a call in `status`."""
    return ARGUMENTS_CAPTIONS.get(status, NEVER_RAN_CAPTION)


def preview_title(status: str) -> str:
    """Return the dry-run panel's title: a prediction while the call waits, a record of it afterwards."""
    if status == "pending_approval":
        return "Dry-run preview"
    return "What the dry run predicted before the decision"


def status_sentence(status: str) -> str:
    """Return a call's state as a sentence a reviewer reads ("The call ran and succeeded.")."""
    return STATUS_SENTENCES.get(status, f"The call is in state {status}.")
