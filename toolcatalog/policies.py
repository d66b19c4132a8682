"""Load a tool's policy from the database, compiling its validators once per version."""

from __future__ import annotations

import threading

from jsonschema import Draft202012Validator

from toolcatalog.models import CumulativeRule, RiskRule, RiskTier, Tool
from toolcatalog.policy import CumulativeSpec, RuleSpec, TierSpec, ToolPolicy
from toolcatalog.schema import compile_validator

Compiled = tuple[Draft202012Validator, tuple[RuleSpec, ...], tuple[CumulativeSpec, ...]]
_compiled: dict[tuple[int, int], Compiled] = {}
_lock = threading.Lock()


def tier_specs() -> dict[int, TierSpec]:
    """Return the current tiers by level (a few rows, read fresh: admins edit them)."""
    return {
        tier.level: TierSpec(
            tier.level, tier.name, tier.requires_approval, tier.approvals_required, tier.approval_window
        )
        for tier in RiskTier.objects.all()
    }


def _compile(tool: Tool) -> Compiled:
    rules = RiskRule.objects.filter(tool_id=tool.pk, enabled=True).select_related("tier").order_by("name")
    specs = tuple(RuleSpec(r.name, r.description, r.tier.level, compile_validator(r.condition)) for r in rules)
    return compile_validator(tool.input_schema), specs, cumulative_specs(tool)


def cumulative_specs(tool: Tool) -> tuple[CumulativeSpec, ...]:
    """Return the tool's enabled cumulative limits, by name."""
    limits = CumulativeRule.objects.filter(tool_id=tool.pk, enabled=True).select_related("tier").order_by("name")
    return tuple(
        CumulativeSpec(
            name=limit.name,
            description=limit.description,
            tier=limit.tier.level,
            sum_argument=limit.sum_argument,
            per=limit.per,
            window=limit.window,
            over=limit.over,
            resource_argument=tool.resource_argument,
            rule_id=limit.pk,
        )
        for limit in limits
    )


def policy_for(tool: Tool, tiers: dict[int, TierSpec] | None = None) -> ToolPolicy:
    """Return the policy of this version of `tool`; validators are compiled once per version."""
    key = (tool.pk, tool.version)
    compiled = _compiled.get(key)
    if compiled is None:
        compiled = _compile(tool)
        with _lock:
            # Older versions of the same tool are never asked for again.
            for stale in [k for k in _compiled if k[0] == tool.pk]:
                del _compiled[stale]
            _compiled[key] = compiled
    validator, rules, cumulative = compiled
    return ToolPolicy(
        name=tool.name,
        version=tool.version,
        base_tier=tool.base_tier.level,
        validator=validator,
        rules=rules,
        tiers=tiers if tiers is not None else tier_specs(),
        cumulative=cumulative,
    )
