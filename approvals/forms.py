"""Console forms: queue filters, what an approval saw, and a reviewer's edit of a call's arguments.

The edit form only turns text into JSON values; whether the values are acceptable
is decided by the tool's schema in `evaluate()`, exactly as for the agent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from django import forms
from django.http import QueryDict

from agents.models import Agent
from approvals.decisions import Seen
from approvals.views.present import MONEY_CENTS_SUFFIX, MONEY_UNITS_SUFFIX, format_brl
from audit.typealiases import DjangoValue, JSONObject, JSONValue
from toolcatalog.models import TIER_LEVELS, Tool
from toolcatalog.sensitive import is_sensitive
from vault.forms import SecretField

# Reviewers never change these: the key is what makes a retried execution harmless downstream.
LOCKED_ARGUMENTS = frozenset({"idempotency_key"})


class QueueFilterForm(forms.Form):
    """Narrow the queue by tool, agent and tier (names in the URL, so links and reloads keep them)."""

    tool = forms.ModelChoiceField(
        queryset=Tool.objects.order_by("name"), to_field_name="name", required=False, empty_label="All tools"
    )
    agent = forms.ModelChoiceField(
        queryset=Agent.objects.order_by("name"), to_field_name="name", required=False, empty_label="All agents"
    )
    tier = forms.TypedChoiceField(
        choices=[("", "All tiers"), *TIER_LEVELS], coerce=int, required=False, empty_value=None
    )

    def filters(self) -> dict[str, DjangoValue]:
        """Return the valid filters as queryset lookups; an unknown value narrows nothing."""
        self.is_valid()
        data = getattr(self, "cleaned_data", {})
        lookups = {"tool": data.get("tool"), "agent": data.get("agent"), "risk_tier": data.get("tier")}
        return {key: value for key, value in lookups.items() if value is not None}


class ApprovalForm(forms.Form):
    """What the Approve button sends: the arguments' hash and the tool version of the page the reviewer read."""

    arguments_hash = forms.CharField(max_length=64, required=False)
    # Not required here: a missing version differs from every call's, so Seen.check refuses it with a reason.
    tool_version = forms.IntegerField(min_value=1, required=False)

    def seen(self) -> Seen:
        """Return what the reviewer was shown (anything unreadable is treated as not shown)."""
        self.is_valid()
        data = getattr(self, "cleaned_data", {})
        return Seen(data.get("arguments_hash") or "", data.get("tool_version"))


def _field_for(name: str, spec: JSONObject, required: bool) -> forms.Field:
    """Return a form field that reads one schema property's value as text."""
    common = {"required": required, "help_text": spec.get("description", ""), "label": name}
    if is_sensitive(spec):
        # Write-only: never shown, sealed between review and confirm; blank keeps the value (approvals.sensitive).
        return SecretField(**{**common, "required": False, "strip": False})
    kind = spec.get("type")
    if "enum" in spec:
        choices = [("", "—")] * (not required) + [(json.dumps(v), str(v)) for v in spec["enum"]]
        return forms.TypedChoiceField(choices=choices, coerce=json.loads, empty_value=None, **common)
    if kind == "integer" and name.endswith("_centavos"):
        # console.js shows the amount in reais beside the cents as the reviewer types, red outside these bounds.
        bounds = {key: spec[key] for key in ("minimum", "maximum") if isinstance(spec.get(key), int)}
        attrs = {"data-money": "cents", **{f"data-{key}": value for key, value in bounds.items()}}
        return forms.IntegerField(widget=forms.NumberInput(attrs=attrs), **common)
    if kind == "integer":
        return forms.IntegerField(**common)
    if kind == "number":
        return forms.FloatField(**common)
    if kind == "boolean":
        choices = [("", "—")] * (not required) + [("true", "yes"), ("false", "no")]
        return forms.TypedChoiceField(choices=choices, coerce=lambda v: v == "true", empty_value=None, **common)
    if kind == "string":
        return forms.CharField(strip=False, **common)
    return JsonField(widget=forms.Textarea(attrs={"rows": 3}), **common)


class JsonField(forms.CharField):
    """A field for arrays and objects, typed as JSON."""

    def to_python(self, value: JSONValue) -> JSONValue:
        text = super().to_python(value)
        if text is None or text in self.empty_values:
            return None
        try:
            return json.loads(text)
        except ValueError:
            raise forms.ValidationError("Not valid JSON.") from None

    def prepare_value(self, value: JSONValue) -> JSONValue:
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class ArgumentsForm(forms.Form):
    """One field per property of a tool's input schema; `arguments()` returns the JSON object."""

    def __init__(self, schema: JSONObject, current: JSONObject, data: QueryDict | None = None) -> None:
        super().__init__(data, initial=_initial(schema, current))
        self.current = current
        self.schema = schema
        required = set(schema.get("required") or [])
        for name, spec in (schema.get("properties") or {}).items():
            field = _field_for(name, spec if isinstance(spec, dict) else {}, name in required)
            if name in LOCKED_ARGUMENTS:
                field.disabled = True
                field.help_text = "Kept as the agent sent it: it stops a retried execution from acting twice."
            self.fields[name] = field

    def arguments(self) -> JSONObject:
        """Return the edited arguments (empty optional fields left out); call after is_valid()."""
        edited = {}
        for name, value in self.cleaned_data.items():
            if value is None or value == "":
                continue
            # "150" typed into a number field is the integer the agent would have sent.
            edited[name] = int(value) if isinstance(value, float) and value.is_integer() else value
        return edited

    def add_schema_errors(self, errors: list[JSONObject]) -> None:
        """Attach the schema's complaints to the fields they name, in a reviewer's words where we know them."""
        messages: dict[str, list[str]] = {}
        for error in errors:
            name = str(error.get("field", "")).split(".")[0].split("[")[0]
            spec = (self.schema.get("properties") or {}).get(name)
            value = getattr(self, "cleaned_data", {}).get(name)
            said = value_problems(name, spec, value) if isinstance(spec, dict) else []
            for message in said or [_schema_words(error)]:
                if message not in messages.setdefault(name, []):
                    messages[name].append(message)
        for name, texts in messages.items():
            for message in texts:
                self.add_error(name if name in self.fields else None, message)


def _schema_words(error: JSONObject) -> str:
    """Return the schema's own complaint, for the cases `value_problems` has no better words for."""
    message = f"{error.get('field')} {error.get('problem')}"
    if error.get("accepted_values"):
        message += ": " + ", ".join(str(v) for v in error["accepted_values"])
    return message


def _amount(name: str, number: float) -> str:
    """Return a bound as the reviewer reads the field: reais for money, the number otherwise."""
    if name.endswith(MONEY_CENTS_SUFFIX):
        return format_brl(int(number))
    if name.endswith(MONEY_UNITS_SUFFIX):
        return format_brl(round(number * 100))
    return f"{number:g}"


def value_problems(name: str, spec: JSONObject, value: JSONValue) -> list[str]:
    """Return what is wrong with one edited value, in words ("Must be at most R$ 50.000,00.")."""
    problems = []
    if isinstance(value, str) and isinstance(spec.get("pattern"), str) and not re.search(spec["pattern"], value):
        described = describe_pattern(spec["pattern"])
        problems.append(f"Must be {described}." if described else f"Must have the form: {spec.get('description')}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        checks: list[tuple[str, Callable[[float], bool], str]] = [
            ("minimum", lambda bound: value < bound, "at least"),
            ("exclusiveMinimum", lambda bound: value <= bound, "more than"),
            ("maximum", lambda bound: value > bound, "at most"),
            ("exclusiveMaximum", lambda bound: value >= bound, "less than"),
        ]
        for key, broken, words in checks:
            bound = spec.get(key)
            if isinstance(bound, int | float) and broken(bound):
                problems.append(f"Must be {words} {_amount(name, bound)}.")
    return problems


# The pieces of the simple anchored patterns tools use for ids: a class or a literal, then how many.
PATTERN_PIECE = re.compile(r"(\\d|\[[^\]]+\]|\\.|[^\\\[\](){}?*+|.^$])(\{\d+(?:,\d*)?\}|[?*+])?")
CLASS_NAMES = {
    "[0-9]": "digit",
    "\\d": "digit",
    "[a-f0-9]": "lowercase hex character",
    "[0-9a-f]": "lowercase hex character",
    "[A-Z]": "capital letter",
    "[a-z]": "lowercase letter",
    "[A-Za-z]": "letter",
    "[A-Za-z0-9]": "letter or digit",
}


def describe_pattern(pattern: str) -> str | None:
    """Return a simple anchored pattern in words: ^PED-[0-9]{8}$ → "PED- followed by 8 digits"; else None."""
    if not (pattern.startswith("^") and pattern.endswith("$")):
        return None
    body, parts, literal, position = pattern[1:-1], [], "", 0
    for match in PATTERN_PIECE.finditer(body):
        if match.start() != position:
            return None
        position = match.end()
        atom, count = match.groups()
        if atom in CLASS_NAMES:
            parts += [literal] if literal else []
            literal = ""
            parts.append(_counted(CLASS_NAMES[atom], count))
        elif not atom.startswith("[") and count is None:
            literal += atom[-1]
        else:
            return None
    if position != len(body):
        return None
    parts += [literal] if literal else []
    return " followed by ".join(parts) or None


def _counted(noun: str, count: str | None) -> str:
    """Return "8 digits", "1 to 3 digits", "one or more digits"… for a class and its quantifier."""
    if count is None:
        return f"1 {noun}"
    if count == "+":
        return f"one or more {noun}s"
    if count == "*":
        return f"any number of {noun}s"
    if count == "?":
        return f"an optional {noun}"
    low, _, high = count.strip("{}").partition(",")
    if not _:
        return f"{low} {noun}{'s' if low != '1' else ''}"
    return f"{low} or more {noun}s" if not high else f"{low} to {high} {noun}s"


def _initial(schema: JSONObject, current: JSONObject) -> JSONObject:
    """Return the call's values as the fields show them (enum and boolean choices are JSON)."""
    properties = schema.get("properties") or {}
    initial = {}
    for name, value in current.items():
        spec = properties.get(name) or {}
        if "enum" in spec:
            initial[name] = json.dumps(value)
        elif spec.get("type") == "boolean":
            initial[name] = "true" if value else "false"
        else:
            initial[name] = value
    return initial
