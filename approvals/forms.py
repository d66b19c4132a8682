"""Console forms: queue filters, and a reviewer's edit of a call's arguments.

The edit form only turns text into JSON values; whether the values are acceptable
is decided by the tool's schema in `evaluate()`, exactly as for the agent.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms

from agents.models import Agent
from toolcatalog.models import TIER_LEVELS, Tool

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

    def filters(self) -> dict[str, Any]:
        """Return the valid filters as queryset lookups; an unknown value narrows nothing."""
        self.is_valid()
        data = getattr(self, "cleaned_data", {})
        lookups = {"tool": data.get("tool"), "agent": data.get("agent"), "risk_tier": data.get("tier")}
        return {key: value for key, value in lookups.items() if value is not None}


def _field_for(name: str, spec: dict[str, Any], required: bool) -> forms.Field:
    """Return a form field that reads one schema property's value as text."""
    common = {"required": required, "help_text": spec.get("description", ""), "label": name}
    kind = spec.get("type")
    if "enum" in spec:
        choices = [("", "—")] * (not required) + [(json.dumps(v), str(v)) for v in spec["enum"]]
        return forms.TypedChoiceField(choices=choices, coerce=json.loads, empty_value=None, **common)
    if kind == "integer" and name.endswith("_centavos"):
        # console.js shows the amount in reais beside the cents as the reviewer types.
        return forms.IntegerField(widget=forms.NumberInput(attrs={"data-money": "cents"}), **common)
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

    def to_python(self, value: Any) -> Any:
        text = super().to_python(value)
        if text in self.empty_values:
            return None
        try:
            return json.loads(text)
        except ValueError:
            raise forms.ValidationError("Not valid JSON.") from None

    def prepare_value(self, value: Any) -> Any:
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class ArgumentsForm(forms.Form):
    """One field per property of a tool's input schema; `arguments()` returns the JSON object."""

    def __init__(self, schema: dict[str, Any], current: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, initial=_initial(schema, current), **kwargs)
        self.current = current
        required = set(schema.get("required") or [])
        for name, spec in (schema.get("properties") or {}).items():
            field = _field_for(name, spec if isinstance(spec, dict) else {}, name in required)
            if name in LOCKED_ARGUMENTS:
                field.disabled = True
                field.help_text = "Kept as the agent sent it: it stops a retried execution from acting twice."
            self.fields[name] = field

    def arguments(self) -> dict[str, Any]:
        """Return the edited arguments (empty optional fields left out); call after is_valid()."""
        edited = {}
        for name, value in self.cleaned_data.items():
            if value is None or value == "":
                continue
            # "150" typed into a number field is the integer the agent would have sent.
            edited[name] = int(value) if isinstance(value, float) and value.is_integer() else value
        return edited

    def add_schema_errors(self, errors: list[dict[str, Any]]) -> None:
        """Attach the schema's complaints to the fields they name."""
        for error in errors:
            name = str(error.get("field", "")).split(".")[0].split("[")[0]
            message = f"{error.get('field')} {error.get('problem')}"
            if error.get("accepted_values"):
                message += ": " + ", ".join(str(v) for v in error["accepted_values"])
            self.add_error(name if name in self.fields else None, message)


def _initial(schema: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
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
