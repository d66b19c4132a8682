"""The catalog's policy as a file: tiers, and each tool's tier, switch, rules of every kind and approver groups.

`read_catalog()` reads the database into a `Catalog`; `to_document()` / `render()`
write it as YAML or JSON; `parse()` reads a file's document back into a `Catalog`,
or lists every problem in it (its shape against FILE_SCHEMA, as the API lists
argument errors, then what only the database can tell: unknown tools, groups, tiers,
invalid conditions). The same values in, the same `Catalog` out, so an export applied
again changes nothing (`approvals.policyplan`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import timedelta

import yaml

from audit.typealiases import JSONObject, JSONValue
from toolcatalog.models import ApproverGroup, CumulativeRule, RiskRule, RiskTier, Tool

ARGUMENTS, CUMULATIVE = "arguments", "cumulative"
DURATION = re.compile(r"^([1-9][0-9]*)([smhd])$")
UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_NAME = {"type": "string", "minLength": 1, "maxLength": 100}
_LEVEL = {"type": "integer", "minimum": 0, "maximum": 3}
_WINDOW = {"type": "string", "pattern": DURATION.pattern}
FILE_SCHEMA: JSONObject = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "tiers": {"type": "array", "items": {"$ref": "#/$defs/tier"}},
        "tools": {"type": "array", "items": {"$ref": "#/$defs/tool"}},
    },
    "$defs": {
        "tier": {
            "type": "object",
            "additionalProperties": False,
            "required": ["level", "name"],
            "properties": {
                "level": _LEVEL,
                "name": {"type": "string", "minLength": 1, "maxLength": 60},
                "description": {"type": "string"},
                "requires_approval": {"type": "boolean"},
                "approvals_required": {"type": "integer", "minimum": 0, "maximum": 32767},
                "approval_window": _WINDOW,
                "approver_group": {"type": ["string", "null"]},
                "allows_standing_approvals": {"type": "boolean"},
            },
        },
        "tool": {
            "type": "object",
            "additionalProperties": False,
            "required": ["name", "tier"],
            "properties": {
                "name": _NAME,
                "tier": _LEVEL,
                "enabled": {"type": "boolean"},
                "rules": {"type": "array", "items": {"$ref": "#/$defs/rule"}},
                "approver_groups": {"type": "array", "items": {"$ref": "#/$defs/approvers"}},
            },
        },
        "rule": {
            "type": "object",
            "required": ["name", "kind", "tier"],
            "properties": {"kind": {"enum": [ARGUMENTS, CUMULATIVE]}},
            "allOf": [
                {"if": {"properties": {"kind": {"const": ARGUMENTS}}}, "then": {"$ref": "#/$defs/argumentRule"}},
                {"if": {"properties": {"kind": {"const": CUMULATIVE}}}, "then": {"$ref": "#/$defs/cumulativeRule"}},
            ],
        },
        "argumentRule": {
            "type": "object",
            "additionalProperties": False,
            "required": ["condition"],
            "properties": {
                "name": _NAME,
                "kind": {"const": ARGUMENTS},
                "description": {"type": "string"},
                "condition": {"type": ["object", "boolean"]},
                "tier": _LEVEL,
                "enabled": {"type": "boolean"},
            },
        },
        "cumulativeRule": {
            "type": "object",
            "additionalProperties": False,
            "required": ["per", "window", "over"],
            "properties": {
                "name": _NAME,
                "kind": {"const": CUMULATIVE},
                "description": {"type": "string"},
                "sum": {"type": "string", "minLength": 1, "maxLength": 100},
                "count": {"const": True},
                "per": {"enum": ["agent", "resource", "tool"]},
                "window": _WINDOW,
                "over": {"type": "integer", "minimum": 0},
                "tier": _LEVEL,
                "enabled": {"type": "boolean"},
            },
        },
        "approvers": {
            "type": "object",
            "additionalProperties": False,
            "required": ["tier", "group"],
            "properties": {"tier": _LEVEL, "group": {"type": "string", "minLength": 1}},
        },
    },
}


@dataclass(frozen=True)
class TierDoc:
    level: int
    name: str
    description: str
    requires_approval: bool
    approvals_required: int
    approval_window: timedelta
    approver_group: str | None
    allows_standing_approvals: bool


@dataclass(frozen=True)
class ArgumentRuleDoc:
    name: str
    description: str
    condition: JSONValue
    tier: int
    enabled: bool


@dataclass(frozen=True)
class CumulativeRuleDoc:
    name: str
    description: str
    sum_argument: str  # "": count the calls
    per: str
    window: timedelta
    over: int
    tier: int
    enabled: bool


RuleDoc = ArgumentRuleDoc | CumulativeRuleDoc


@dataclass(frozen=True)
class ToolDoc:
    name: str
    tier: int
    enabled: bool
    rules: tuple[RuleDoc, ...]  # by name
    approver_groups: tuple[tuple[int, str], ...]  # (min tier, group name), sorted


@dataclass(frozen=True)
class Catalog:
    tiers: tuple[TierDoc, ...]  # by level
    tools: tuple[ToolDoc, ...]  # by name


class PolicyFileError(Exception):
    """The file cannot be applied; `problems` lists every reason, each naming where."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__(f"{len(problems)} problem(s) in the policy file")
        self.problems = problems


# ------------------------------------------------------------------ durations


def duration_text(value: timedelta) -> str:
    """Return a window as the file writes it: the largest whole unit ("24h", "90m", "1d")."""
    seconds = int(value.total_seconds())
    unit = next(unit for unit, size in UNITS.items() if seconds % size == 0)
    return f"{seconds // UNITS[unit]}{unit}"


def parse_duration(text: str) -> timedelta:
    """Return the timedelta of "24h" (s, m, h, d); the schema has checked the shape."""
    match = DURATION.match(text)
    if match is None:
        raise ValueError(f"not a duration: {text!r}")
    return timedelta(seconds=int(match.group(1)) * UNITS[match.group(2)])


# ------------------------------------------------------------------ the database → a Catalog


def read_tiers() -> tuple[TierDoc, ...]:
    """Return the tiers as the file describes them."""
    return tuple(
        TierDoc(
            t.level,
            t.name,
            t.description,
            t.requires_approval,
            t.approvals_required,
            t.approval_window,
            t.approver_group.name if t.approver_group else None,
            t.allows_standing_approvals,
        )
        for t in RiskTier.objects.select_related("approver_group").order_by("level")
    )


def read_tool(tool: Tool) -> ToolDoc:
    """Return one tool's policy as the file describes it."""
    rules: list[RuleDoc] = [
        ArgumentRuleDoc(r.name, r.description, r.condition, r.tier.level, r.enabled)
        for r in RiskRule.objects.filter(tool=tool).select_related("tier")
    ]
    rules += [
        CumulativeRuleDoc(r.name, r.description, r.sum_argument, r.per, r.window, r.over, r.tier.level, r.enabled)
        for r in CumulativeRule.objects.filter(tool=tool).select_related("tier")
    ]
    approvers = ApproverGroup.objects.filter(tool=tool).values_list("min_tier", "group__name")
    return ToolDoc(
        tool.name,
        tool.base_tier.level,
        tool.enabled,
        tuple(sorted(rules, key=lambda rule: rule.name)),
        tuple(sorted(approvers)),
    )


def read_catalog(names: list[str] | None = None) -> Catalog:
    """Return the catalog's policy (of the tools named, or all), as the file describes it."""
    tools = Tool.objects.select_related("base_tier").order_by("name")
    if names is not None:
        tools = tools.filter(name__in=names)
    return Catalog(read_tiers(), tuple(read_tool(tool) for tool in tools))


# ------------------------------------------------------------------ a Catalog → a document


def rule_document(rule: RuleDoc) -> JSONObject:
    """Return a rule as the file writes it."""
    if isinstance(rule, ArgumentRuleDoc):
        return {
            "name": rule.name,
            "kind": ARGUMENTS,
            "description": rule.description,
            "condition": rule.condition,
            "tier": rule.tier,
            "enabled": rule.enabled,
        }
    amount: JSONObject = {"sum": rule.sum_argument} if rule.sum_argument else {"count": True}
    return {
        "name": rule.name,
        "kind": CUMULATIVE,
        "description": rule.description,
        **amount,
        "per": rule.per,
        "window": duration_text(rule.window),
        "over": rule.over,
        "tier": rule.tier,
        "enabled": rule.enabled,
    }


def to_document(catalog: Catalog) -> JSONObject:
    """Return the catalog as the file's plain values."""
    tiers = [
        {
            "level": t.level,
            "name": t.name,
            "description": t.description,
            "requires_approval": t.requires_approval,
            "approvals_required": t.approvals_required,
            "approval_window": duration_text(t.approval_window),
            "approver_group": t.approver_group,
            "allows_standing_approvals": t.allows_standing_approvals,
        }
        for t in catalog.tiers
    ]
    tools = [
        {
            "name": tool.name,
            "tier": tool.tier,
            "enabled": tool.enabled,
            "rules": [rule_document(rule) for rule in tool.rules],
            "approver_groups": [{"tier": tier, "group": group} for tier, group in tool.approver_groups],
        }
        for tool in catalog.tools
    ]
    return {"tiers": tiers, "tools": tools}


def render(catalog: Catalog, file_format: str) -> str:
    """Return the catalog as a YAML or JSON text."""
    document = to_document(catalog)
    if file_format == "json":
        return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=120)


def load(text: str) -> JSONValue:
    """Return a file's document (YAML, of which JSON is a part); PolicyFileError if it is neither."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise PolicyFileError([f"not YAML or JSON: {error}"]) from error
