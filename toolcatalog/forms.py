"""Admin forms of the catalog: readable JSON fields, and schemas refused with a clear reason.

Forms only check and convert input; the decisions themselves live in
`toolcatalog.policy` and the checks of a schema in `toolcatalog.schemacheck`.
"""

from __future__ import annotations

import json

from django import forms
from django.core.exceptions import ValidationError
from django.utils.module_loading import import_string

from audit.typealiases import DjangoValue, JSONObject, JSONValue
from toolcatalog.executors.base import Executor
from toolcatalog.executors.httpapi import url_template_problems
from toolcatalog.models import TIER_LEVELS, ExecutorKind, RiskRule, RiskTier, Tool
from toolcatalog.schemacheck import input_schema_problems, schema_problems

TIER_HELP = (
    "Tiers measure blast radius. 0 read: runs at once. 1 reversible write: runs at once, needs an "
    "idempotency key. 2 irreversible write: one reviewer approves. 3 critical: two distinct reviewers "
    "approve (four-eyes). A call's tier is the highest of its tool's base tier and every enabled rule it matches."
)
CONDITION_HELP = (
    "A JSON Schema (2020-12) over the call's arguments: the rule fires when the arguments match it, and "
    'the call is raised to this rule\'s tier. Example — refunds above R$ 200,00: {"properties": '
    '{"valor_centavos": {"minimum": 20001}}, "required": ["valor_centavos"]}. Put the field in "required", '
    "or a call without it matches too. Only local $refs (#/$defs/…); nothing is fetched over the network."
)


class JSONTextarea(forms.Textarea):
    """A monospace textarea sized to its content."""

    def __init__(self, attrs: dict[str, DjangoValue] | None = None) -> None:
        super().__init__({"class": "gh-json", "spellcheck": "false", **(attrs or {})})

    def get_context(self, name: str, value: JSONValue, attrs: dict[str, DjangoValue] | None) -> dict[str, DjangoValue]:
        """Return the template context, with as many rows as the JSON has lines (within reason)."""
        context = super().get_context(name, value, attrs)
        lines = str(value or "").count("\n") + 2
        context["widget"]["attrs"]["rows"] = max(4, min(lines, 40))
        return context


class PrettyJSONField(forms.JSONField):
    """A JSON form field that shows its value indented, in a monospace box."""

    widget = JSONTextarea

    def prepare_value(self, value: JSONValue) -> JSONValue:
        """Return the value as indented JSON text (invalid input is shown back as typed, nothing as nothing)."""
        if isinstance(value, forms.fields.InvalidJSONInput):
            return value
        if value is None and not self.required:
            return ""  # an empty box, not "null": saving it back stores nothing again
        return json.dumps(value, ensure_ascii=False, indent=2, cls=self.encoder)


def _raise_problems(problems: list[str]) -> None:
    if problems:
        raise ValidationError([ValidationError(problem, code="invalid_schema") for problem in problems])


class ToolAdminForm(forms.ModelForm[Tool]):
    """A tool: its schemas must be sound JSON Schemas, its executor must be loadable."""

    class Meta:
        model = Tool
        fields = [
            "name",
            "title",
            "description",
            "enabled",
            "input_schema",
            "output_schema",
            "resource_argument",
            "base_tier",
            "read_only_hint",
            "destructive_hint",
            "idempotent_hint",
            "open_world_hint",
            "executor_kind",
            "executor_ref",
            "audience",
        ]
        field_classes = {"input_schema": PrettyJSONField, "output_schema": PrettyJSONField}
        help_texts = {
            "input_schema": "JSON Schema (2020-12) of the arguments, an object schema. Checked on save against "
            "the metaschema: types, regular expressions and formats must be valid, and $refs local "
            "(#/$defs/…): nothing is fetched over the network.",
            "output_schema": "Optional JSON Schema (2020-12) of the result, shown to agents as outputSchema.",
            "base_tier": "The tier of every call of this tool before rules raise it. " + TIER_HELP,
            "resource_argument": "The argument naming the resource a call acts on (e.g. pedido_id); "
            "it scopes the call's credential.",
        }

    def clean_input_schema(self) -> JSONValue:
        schema = self.cleaned_data.get("input_schema")
        _raise_problems(input_schema_problems(schema))
        return schema

    def clean_output_schema(self) -> JSONValue:
        schema = self.cleaned_data.get("output_schema")
        if schema is not None:
            _raise_problems(schema_problems(schema))
        return schema

    def clean(self) -> dict[str, DjangoValue]:
        """Return the cleaned data; the resource argument and executor must fit the tool."""
        super().clean()
        data = self.cleaned_data
        schema, resource = data.get("input_schema"), data.get("resource_argument")
        if isinstance(schema, dict) and resource and resource not in (schema.get("properties") or {}):
            self.add_error("resource_argument", f"{resource!r} is not a property of the input schema.")
        problem = executor_problem(data.get("executor_kind"), data.get("executor_ref"))
        if problem:
            self.add_error("executor_ref", problem)
        if data.get("executor_kind") == ExecutorKind.HTTP and isinstance(schema, dict):
            for problem in url_template_problems(data.get("executor_ref") or "", schema.get("properties") or {}):
                self.add_error("executor_ref", problem)
        return data


def executor_problem(kind: str | None, ref: str | None) -> str | None:
    """Return why (kind, ref) cannot name an executor, or None if it can."""
    if not kind or not ref:
        return None
    if kind == ExecutorKind.GATEHOUSE_PROTOCOL:
        ok = ref.startswith("/") or ref.startswith(("http://", "https://"))
        return None if ok else "A Gatehouse protocol endpoint is a path on the demo services (/…) or an http(s):// URL."
    if kind == ExecutorKind.HTTP:
        return None  # a URL template, checked against the input schema (ToolAdminForm.clean)
    try:
        target = import_string(ref)
    except ImportError as exc:
        return f"Cannot import {ref!r}: {exc}"
    if not (isinstance(target, type) and issubclass(target, Executor)):
        return f"{ref!r} is not an Executor class."
    return None


class RiskRuleForm(forms.ModelForm[RiskRule]):
    """A rule: its condition must be a sound JSON Schema."""

    class Meta:
        model = RiskRule
        fields = ["name", "description", "condition", "tier", "enabled"]
        field_classes = {"condition": PrettyJSONField}
        help_texts = {"condition": CONDITION_HELP, "tier": "The tier a matching call is raised to (never lowered)."}

    def __init__(self, *args: DjangoValue, **kwargs: DjangoValue) -> None:
        super().__init__(*args, **kwargs)
        # {} is a real condition (every call matches), though Django counts it as empty.
        self.fields["condition"].required = False

    def clean_condition(self) -> JSONValue:
        condition = self.cleaned_data.get("condition")
        if condition is None:
            raise ValidationError("Give a condition: a JSON Schema over the arguments ({} matches every call).")
        _raise_problems(schema_problems(condition))
        return condition


class RiskTierForm(forms.ModelForm[RiskTier]):
    """A tier: what it takes for a call at this level to run."""

    class Meta:
        model = RiskTier
        fields = [
            "level",
            "name",
            "description",
            "requires_approval",
            "approvals_required",
            "approval_window",
            "approver_group",
        ]
        help_texts = {"level": TIER_HELP}

    def clean(self) -> dict[str, DjangoValue]:
        """Return the cleaned data; a tier that requires approval needs at least one approver."""
        super().clean()
        data = self.cleaned_data
        needs, count = data.get("requires_approval"), data.get("approvals_required")
        if needs and not count:
            self.add_error("approvals_required", "A tier that requires approval needs at least 1 approval.")
        if needs is False and count:
            self.add_error("approvals_required", "A tier that does not require approval takes 0 approvals.")
        return data


class TryArgumentsForm(forms.Form):
    """Arguments to judge with the tool's current policy, as if an agent proposed them."""

    arguments = PrettyJSONField(
        required=False,
        help_text="The call's arguments as a JSON object, exactly as an agent would send them.",
    )
    max_tier = forms.TypedChoiceField(
        choices=TIER_LEVELS,
        coerce=int,
        initial=3,
        label="Agent's grant up to",
        help_text="Judge the call as an agent whose grant on this tool allows up to this tier.",
    )
    agent = forms.CharField(
        required=False,
        max_length=100,
        label="Agent's name",
        help_text="For limits per agent: judge with this agent's calls in the window (empty: those are left out).",
    )

    def clean_arguments(self) -> JSONValue:
        arguments = self.cleaned_data.get("arguments")
        if arguments is None:
            raise ValidationError("Paste the arguments as a JSON object, e.g. {}.")
        return arguments


class WhatIfForm(forms.Form):
    """A policy to replay recent calls against: the current one, or an edited, unsaved one."""

    days = forms.IntegerField(min_value=1, max_value=3650, initial=30, help_text="Replay the calls of the last N days.")
    base_tier = forms.TypedChoiceField(choices=TIER_LEVELS, coerce=int, help_text=TIER_HELP)
    rules = PrettyJSONField(
        required=False,
        help_text='A list of rules: {"name", "tier", "condition", "description"?, "enabled"?}. '
        "Edit freely: nothing is saved. " + CONDITION_HELP,
    )

    def __init__(self, *args: DjangoValue, tier_levels: set[int], **kwargs: DjangoValue) -> None:
        super().__init__(*args, **kwargs)
        self.tier_levels = tier_levels

    def clean_base_tier(self) -> int:
        level: int = self.cleaned_data["base_tier"]
        if level not in self.tier_levels:
            raise ValidationError(f"There is no tier {level}.")
        return level

    def clean_rules(self) -> list[JSONObject]:
        """Return the rules as a list of {name, description, tier, condition, enabled}."""
        rules = self.cleaned_data.get("rules") or []
        if not isinstance(rules, list):
            raise ValidationError("Rules are a JSON list of objects.")
        problems, cleaned = [], []
        for index, rule in enumerate(rules):
            rule_problems = self._rule_problems(rule)
            problems += [f"rule {index + 1}: {problem}" for problem in rule_problems]
            if not rule_problems:
                cleaned.append(
                    {
                        "name": rule["name"],
                        "description": str(rule.get("description", "")),
                        "tier": rule["tier"],
                        "condition": rule["condition"],
                        "enabled": rule.get("enabled", True),
                    }
                )
        _raise_problems(problems)
        return cleaned

    def _rule_problems(self, rule: JSONValue) -> list[str]:
        if not isinstance(rule, dict):
            return ["must be an object"]
        problems = []
        if not isinstance(rule.get("name"), str) or not rule["name"]:
            problems.append('"name" must be a non-empty string')
        if rule.get("tier") not in self.tier_levels or isinstance(rule.get("tier"), bool):
            problems.append(f'"tier" must be one of {sorted(self.tier_levels)}')
        if not isinstance(rule.get("enabled", True), bool):
            problems.append('"enabled" must be true or false')
        if "condition" not in rule:
            problems.append('"condition" is required')
        else:
            problems += [f"condition {problem}" for problem in schema_problems(rule["condition"])]
        return problems
