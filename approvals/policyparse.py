"""Reading a policy file into a `Catalog`, or refusing it whole with every problem listed.

First the file's shape against `policyfile.FILE_SCHEMA` (each problem named by its
place, `tools[0].rules[1].window: …`, as the API names argument errors), then what
only the database can tell, for every tier and tool whose shape is right: an unknown
tool or group, a tier that does not exist, a condition that is no JSON Schema, a sum
over an argument the tool does not take, two rules of one name.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from django.contrib.auth.models import Group

from approvals.policyfile import (
    ARGUMENTS,
    FILE_SCHEMA,
    ArgumentRuleDoc,
    Catalog,
    CumulativeRuleDoc,
    PolicyFileError,
    RuleDoc,
    TierDoc,
    ToolDoc,
    parse_duration,
)
from audit.typealiases import JSONObject, JSONValue
from toolcatalog.models import RiskTier, Tool
from toolcatalog.schema import argument_errors, compile_validator
from toolcatalog.schemacheck import schema_problems

DEFAULT_WINDOW = "24h"


def shape_problems(document: JSONValue) -> tuple[list[str], set[str]]:
    """Return the file's shape problems, and the places they name ("tools[0].rules[1].window")."""
    problems, broken = [], set()
    for error in argument_errors(compile_validator(FILE_SCHEMA), document):
        field, accepted = str(error["field"]), error.get("accepted_values")
        listed = f" (accepted: {', '.join(map(str, accepted))})" if isinstance(accepted, list) else ""
        problems.append(f"{field}: {error['problem']}{listed}")
        broken.add(field)
    return problems, broken


def hit(broken: set[str], place: str) -> bool:
    """Return whether a shape problem lies at `place` or inside it (so the checks after it skip it)."""
    return any(field == place or field.startswith((f"{place}.", f"{place}[")) for field in broken)


def own_fields_hit(broken: set[str], place: str, names: tuple[str, ...]) -> bool:
    """Return whether a shape problem lies at `place` itself or at one of its fields `names` (not deeper)."""
    return place in broken or any(f"{place}.{name}" in broken for name in names)


@dataclass
class _Known:
    """What the database says a file may name, and where the file's shape is already wrong."""

    tools: dict[str, Tool]
    groups: set[str]
    levels: set[int]
    broken: set[str]


def tier_problems(place: str, tier: JSONObject, known: _Known) -> list[str]:
    group = tier.get("approver_group")
    return [f"{place}.approver_group: no group named {group!r}"] if group and group not in known.groups else []


def rule_problems(place: str, rule: JSONObject, tool: Tool, known: _Known) -> list[str]:
    """Return what is wrong with one rule of `tool` that only the catalog can tell (its well-shaped fields)."""
    fine = {name for name in rule if not hit(known.broken, f"{place}.{name}")}
    problems = [] if "tier" not in fine or rule["tier"] in known.levels else [f"{place}.tier: no tier {rule['tier']}"]
    if rule["kind"] == ARGUMENTS:
        condition = rule.get("condition") if "condition" in fine else True
        return problems + [f"{place}.condition: {problem}" for problem in schema_problems(condition)]
    if ("sum" in rule) == ("count" in rule):
        problems.append(f"{place}: give either `sum: ARGUMENT` or `count: true`")
    elif "sum" in fine and rule["sum"] not in (tool.input_schema.get("properties") or {}):
        problems.append(f"{place}.sum: “{tool.name}” takes no argument {rule['sum']!r}")
    if "per" in fine and rule["per"] == "resource" and not tool.resource_argument:
        problems.append(f"{place}.per: “{tool.name}” names no resource argument")
    return problems


def tool_problems(place: str, item: JSONObject, known: _Known) -> list[str]:
    """Return what is wrong with one tool entry that only the catalog can tell."""
    tool = known.tools.get(item["name"])
    if tool is None:
        return [f"{place}.name: no tool named {item['name']!r} (a policy file changes tools, it does not add them)"]
    problems = [] if item["tier"] in known.levels else [f"{place}.tier: no tier {item['tier']}"]
    rules = item.get("rules", [])
    for name, count in Counter(rule.get("name") for rule in rules).items():
        if count > 1:
            problems.append(f"{place}.rules: {count} rules named {name!r}")
    for index, rule in enumerate(rules):
        if not own_fields_hit(known.broken, f"{place}.rules[{index}]", ("name", "kind")):
            problems += rule_problems(f"{place}.rules[{index}]", rule, tool, known)
    entries = item.get("approver_groups", [])
    for index, entry in enumerate(entries):
        if not hit(known.broken, f"{place}.approver_groups[{index}]") and entry["group"] not in known.groups:
            problems.append(f"{place}.approver_groups[{index}].group: no group named {entry['group']!r}")
    pairs = [(entry.get("tier"), entry.get("group")) for entry in entries]
    if len(set(pairs)) < len(pairs):
        problems.append(f"{place}.approver_groups: the same group twice at one tier")
    return problems


TOOL_FIELDS = ("name", "tier", "rules", "approver_groups")


def catalog_problems(document: JSONObject, broken: set[str]) -> list[str]:
    """Return every problem the catalog finds in the parts of `document` whose shape is right."""
    tiers = [(f"tiers[{i}]", t) for i, t in enumerate(document.get("tiers") or []) if not hit(broken, f"tiers[{i}]")]
    tools = [
        (f"tools[{i}]", t)
        for i, t in enumerate(document.get("tools") or [])
        if not own_fields_hit(broken, f"tools[{i}]", TOOL_FIELDS)
    ]
    if "tiers" in broken or "tools" in broken:
        return []
    known = _Known(
        tools={tool.name: tool for tool in Tool.objects.filter(name__in=[item["name"] for _, item in tools])},
        groups=set(Group.objects.values_list("name", flat=True)),
        levels=set(RiskTier.objects.values_list("level", flat=True)) | {tier["level"] for _, tier in tiers},
        broken=broken,
    )
    problems = [
        f"tools: {name!r} appears {n} times" for name, n in Counter(t["name"] for _, t in tools).items() if n > 1
    ]
    problems += [
        f"tiers: level {lv} appears {n} times" for lv, n in Counter(t["level"] for _, t in tiers).items() if n > 1
    ]
    for place, tier in tiers:
        problems += tier_problems(place, tier, known)
    for place, item in tools:
        problems += tool_problems(place, item, known)
    return problems


def parse(document: JSONValue) -> Catalog:
    """Return the Catalog a file's document describes; PolicyFileError listing every problem if it is not valid."""
    document = {} if document is None else document
    problems, broken = shape_problems(document)
    if isinstance(document, dict):
        problems += catalog_problems(document, broken)
    if problems:
        raise PolicyFileError(problems)
    tiers = sorted((tier_doc(tier) for tier in document.get("tiers", [])), key=lambda tier: tier.level)
    tools = sorted((tool_doc(item) for item in document.get("tools", [])), key=lambda tool: tool.name)
    return Catalog(tuple(tiers), tuple(tools))


def tier_doc(tier: JSONObject) -> TierDoc:
    """Return a tier entry, what it leaves out at the model's defaults."""
    return TierDoc(
        level=tier["level"],
        name=tier["name"],
        description=tier.get("description", ""),
        requires_approval=tier.get("requires_approval", False),
        approvals_required=tier.get("approvals_required", 0),
        approval_window=parse_duration(tier.get("approval_window", DEFAULT_WINDOW)),
        approver_group=tier.get("approver_group") or None,
        allows_standing_approvals=tier.get("allows_standing_approvals", False),
    )


def rule_doc(rule: JSONObject) -> RuleDoc:
    """Return a rule entry; description empty and enabled unless it says otherwise."""
    common = {"name": rule["name"], "description": rule.get("description", ""), "tier": rule["tier"]}
    enabled = rule.get("enabled", True)
    if rule["kind"] == ARGUMENTS:
        return ArgumentRuleDoc(condition=rule["condition"], enabled=enabled, **common)
    return CumulativeRuleDoc(
        sum_argument=rule.get("sum", ""),
        per=rule["per"],
        window=parse_duration(rule["window"]),
        over=rule["over"],
        enabled=enabled,
        **common,
    )


def tool_doc(item: JSONObject) -> ToolDoc:
    """Return a tool entry; enabled unless it says otherwise, no rules and no groups unless listed."""
    return ToolDoc(
        name=item["name"],
        tier=item["tier"],
        enabled=item.get("enabled", True),
        rules=tuple(sorted((rule_doc(rule) for rule in item.get("rules", [])), key=lambda rule: rule.name)),
        approver_groups=tuple(sorted((entry["tier"], entry["group"]) for entry in item.get("approver_groups", []))),
    )
