"""Making the catalog match a policy file: the difference, the what-if of it, and applying it as one change.

`differences()` compares the catalog with the file for the tiers and tools the file
lists (others are left as they are). `apply()` makes those match in one transaction,
under the rows' locks, with one `catalog.applied` audit event, and makes each tool
whose judging changed one new version (announced after commit, so waiting calls are
judged again); a file that matches already changes nothing and records nothing.
`whatif()` replays the last days' calls under the file's rules (`approvals.whatif`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from datetime import timedelta

from django.contrib.auth.models import Group
from django.db import transaction
from django.utils import timezone

from approvals.policyfile import (
    ArgumentRuleDoc,
    Catalog,
    CumulativeRuleDoc,
    RuleDoc,
    TierDoc,
    ToolDoc,
    duration_text,
    read_catalog,
    rule_document,
)
from approvals.whatif import WhatIfReport, replay, stored_calls
from audit.chain import record
from toolcatalog.models import ApproverGroup, CumulativeRule, RiskRule, RiskTier, Tool
from toolcatalog.policies import tier_specs
from toolcatalog.policy import CumulativeSpec, TierSpec, ToolPolicy, compile_policy
from toolcatalog.signals import announce_policy_change


@dataclass(frozen=True)
class Change:
    """One difference between the catalog and the file, as a line a person reads."""

    subject: str  # "tier 2", "tool emitir_estorno"
    text: str
    tool: str = ""  # the tool's name when the change is about one
    judged: bool = True  # whether it changes what the pipeline decides (approver groups do not)

    def __str__(self) -> str:
        return f"{self.subject}: {self.text}"


def shown(value: object) -> str:
    """Return a value as a difference line writes it."""
    if isinstance(value, timedelta):
        return duration_text(value)
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def field_changes(before: object, after: object, skip: tuple[str, ...] = ()) -> list[str]:
    """Return "name: before → after" for each field of two dataclasses of one kind that differs."""
    return [
        f"{f.name} {shown(getattr(before, f.name))} → {shown(getattr(after, f.name))}"
        for f in fields(after)  # type: ignore[arg-type]
        if f.name not in skip and getattr(before, f.name) != getattr(after, f.name)
    ]


def tier_differences(current: tuple[TierDoc, ...], wanted: tuple[TierDoc, ...]) -> list[Change]:
    now = {tier.level: tier for tier in current}
    changes = []
    for tier in wanted:
        if tier.level not in now:
            changes.append(Change(f"tier {tier.level}", f"added ({tier.name})"))
        elif now[tier.level] != tier:
            before = now[tier.level]
            # Whether a call waits for approval, and for how many, is judged; a name or a window is not.
            judged = (before.requires_approval, before.approvals_required) != (
                tier.requires_approval,
                tier.approvals_required,
            )
            changes.append(Change(f"tier {tier.level}", "; ".join(field_changes(before, tier)), judged=judged))
    return changes


def rule_differences(tool: str, current: tuple[RuleDoc, ...], wanted: tuple[RuleDoc, ...]) -> list[Change]:
    subject = f"tool {tool}"
    now, then = {rule.name: rule for rule in current}, {rule.name: rule for rule in wanted}
    changes = [Change(subject, f"rule {name} removed", tool) for name in sorted(set(now) - set(then))]
    for name, rule in then.items():
        before = now.get(name)
        if before is None or type(before) is not type(rule):
            verb = "added" if before is None else "replaced"
            changes.append(Change(subject, f"rule {name} {verb}: {shown(rule_document(rule))}", tool))
        elif before != rule:
            changes.append(Change(subject, f"rule {name}: {'; '.join(field_changes(before, rule))}", tool))
    return changes


def tool_differences(current: ToolDoc, wanted: ToolDoc) -> list[Change]:
    subject, name = f"tool {wanted.name}", wanted.name
    changes = [Change(subject, line, name) for line in field_changes(current, wanted, ("rules", "approver_groups"))]
    changes += rule_differences(name, current.rules, wanted.rules)
    now, then = set(current.approver_groups), set(wanted.approver_groups)
    changes += [Change(subject, f"approvers at tier ≥ {t}: {g} removed", name, False) for t, g in sorted(now - then)]
    changes += [Change(subject, f"approvers at tier ≥ {t}: {g} added", name, False) for t, g in sorted(then - now)]
    return changes


def differences(current: Catalog, wanted: Catalog) -> list[Change]:
    """Return what would change to make the catalog's listed tiers and tools match `wanted`."""
    now = {tool.name: tool for tool in current.tools}
    changes = tier_differences(current.tiers, wanted.tiers)
    for tool in wanted.tools:
        changes += tool_differences(now[tool.name], tool)
    return changes


# ------------------------------------------------------------------ applying


def apply(wanted: Catalog, actor: tuple[str, str]) -> list[Change]:
    """Make the catalog match `wanted` in one transaction with one audit event; return the changes ([]: none)."""
    with transaction.atomic():
        names = [tool.name for tool in wanted.tools]
        # Locked so two applies (or an admin's save) cannot interleave between the read and the writes.
        list(RiskTier.objects.select_for_update().order_by("level"))
        tools = {tool.name: tool for tool in Tool.objects.select_for_update().filter(name__in=names).order_by("pk")}
        current = read_catalog(names)
        changes = differences(current, wanted)
        if not changes:
            return []
        if any(change.subject.startswith("tier ") for change in changes):
            apply_tiers(wanted.tiers)
        levels = {tier.level: tier for tier in RiskTier.objects.all()}
        now = {tool.name: tool for tool in current.tools}
        for doc in wanted.tools:
            apply_tool(tools[doc.name], now[doc.name], doc, levels)
        record("catalog.applied", actor=actor, data={"changes": [str(change) for change in changes]})
    return changes


def apply_tiers(tiers: tuple[TierDoc, ...]) -> None:
    """Make each listed tier match; waiting calls are judged again after commit."""
    groups = {group.name: group for group in Group.objects.filter(name__in=[t.approver_group for t in tiers])}
    for tier in tiers:
        values = {f.name: getattr(tier, f.name) for f in fields(tier) if f.name not in ("level", "approver_group")}
        RiskTier.objects.update_or_create(
            level=tier.level, defaults={**values, "approver_group": groups.get(tier.approver_group or "")}
        )
    announce_policy_change(RiskTier)


def apply_tool(tool: Tool, current: ToolDoc, wanted: ToolDoc, levels: dict[int, RiskTier]) -> None:
    """Make one tool match; a change to how its calls are judged makes it one new version."""
    if current == wanted:
        return
    if (current.tier, current.enabled) != (wanted.tier, wanted.enabled):
        Tool.objects.filter(pk=tool.pk).update(
            base_tier=levels[wanted.tier], enabled=wanted.enabled, updated_at=timezone.now()
        )
    # Rows are written by queries, not save(): each save would make the tool a new version of its own.
    arguments = [rule for rule in wanted.rules if isinstance(rule, ArgumentRuleDoc)]
    limits = [rule for rule in wanted.rules if isinstance(rule, CumulativeRuleDoc)]
    sync_argument_rules(tool, arguments, levels)
    sync_cumulative_rules(tool, limits, levels)
    sync_approvers(tool, wanted.approver_groups)
    if (current.tier, current.enabled, current.rules) != (wanted.tier, wanted.enabled, wanted.rules):
        tool.bump_version()


def sync_argument_rules(tool: Tool, rules: list[ArgumentRuleDoc], levels: dict[int, RiskTier]) -> None:
    RiskRule.objects.filter(tool=tool).exclude(name__in=[rule.name for rule in rules]).delete()
    for rule in rules:
        values = {
            "description": rule.description,
            "condition": rule.condition,
            "tier": levels[rule.tier],
            "enabled": rule.enabled,
        }
        if not RiskRule.objects.filter(tool=tool, name=rule.name).update(**values):
            RiskRule.objects.bulk_create([RiskRule(tool=tool, name=rule.name, **values)])


def sync_cumulative_rules(tool: Tool, rules: list[CumulativeRuleDoc], levels: dict[int, RiskTier]) -> None:
    CumulativeRule.objects.filter(tool=tool).exclude(name__in=[rule.name for rule in rules]).delete()
    for rule in rules:
        values = {
            "description": rule.description,
            "sum_argument": rule.sum_argument,
            "per": rule.per,
            "window": rule.window,
            "over": rule.over,
            "tier": levels[rule.tier],
            "enabled": rule.enabled,
        }
        if not CumulativeRule.objects.filter(tool=tool, name=rule.name).update(**values):
            CumulativeRule.objects.bulk_create([CumulativeRule(tool=tool, name=rule.name, **values)])


def sync_approvers(tool: Tool, wanted: tuple[tuple[int, str], ...]) -> None:
    rows = {
        (row.min_tier, row.group.name): row for row in ApproverGroup.objects.filter(tool=tool).select_related("group")
    }
    ApproverGroup.objects.filter(pk__in=[row.pk for key, row in rows.items() if key not in wanted]).delete()
    groups = {group.name: group for group in Group.objects.filter(name__in=[name for _, name in wanted])}
    missing = [
        ApproverGroup(tool=tool, min_tier=tier, group=groups[name]) for tier, name in wanted if (tier, name) not in rows
    ]
    ApproverGroup.objects.bulk_create(missing)


# ------------------------------------------------------------------ what-if


def whatif_tools(changes: list[Change], wanted: Catalog) -> list[ToolDoc]:
    """Return the tools whose calls would be judged differently: a changed tier touches every listed tool."""
    if any(change.judged and change.subject.startswith("tier ") for change in changes):
        return list(wanted.tools)
    touched = {change.tool for change in changes if change.judged and change.tool}
    return [tool for tool in wanted.tools if tool.name in touched]


def wanted_tiers(wanted: Catalog) -> dict[int, TierSpec]:
    """Return the tiers as they would be: the catalog's, with the file's in their place."""
    tiers = tier_specs()
    for t in wanted.tiers:
        tiers[t.level] = TierSpec(t.level, t.name, t.requires_approval, t.approvals_required, t.approval_window)
    return tiers


def wanted_policy(tool: Tool, doc: ToolDoc, tiers: dict[int, TierSpec]) -> ToolPolicy:
    """Return the policy `tool` would have under the file (its schema and resource argument as they are)."""
    arguments = [r for r in doc.rules if isinstance(r, ArgumentRuleDoc) and r.enabled]
    limits = [r for r in doc.rules if isinstance(r, CumulativeRuleDoc) and r.enabled]
    return compile_policy(
        name=tool.name,
        version=tool.version,
        base_tier=doc.tier,
        input_schema=tool.input_schema,
        rules=[(r.name, r.description, r.tier, r.condition) for r in arguments],
        tiers=tiers,
        cumulative=[
            CumulativeSpec(
                r.name, r.description, r.tier, r.sum_argument, r.per, r.window, r.over, tool.resource_argument
            )
            for r in limits
        ],
    )


def whatif(changes: list[Change], wanted: Catalog, days: int) -> list[tuple[str, WhatIfReport]]:
    """Return, for each tool whose judging would change, the replay of its last `days` days of calls."""
    tiers = wanted_tiers(wanted)
    since = timezone.now() - timedelta(days=days)
    reports = []
    for doc in whatif_tools(changes, wanted):
        tool = Tool.objects.get(name=doc.name)
        reports.append((doc.name, replay(wanted_policy(tool, doc, tiers), stored_calls(tool.pk, since))))
    return reports
