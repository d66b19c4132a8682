"""Load a tool's policy from the database, compiling its validators once per version."""

from __future__ import annotations

import threading

from jsonschema import Draft202012Validator

from toolcatalog.models import RiskRule, RiskTier, Tool
from toolcatalog.policy import RuleSpec, TierSpec, ToolPolicy
from toolcatalog.schema import compile_validator

_compiled: dict[tuple[int, int], tuple[Draft202012Validator, tuple[RuleSpec, ...]]] = {}
_lock = threading.Lock()


def tier_specs() -> dict[int, TierSpec]:
    """Return the current tiers by level (a few rows, read fresh: admins edit them)."""
    return {
        tier.level: TierSpec(
            tier.level, tier.name, tier.requires_approval, tier.approvals_required, tier.approval_window
        )
        for tier in RiskTier.objects.all()
    }


def _compile(tool: Tool) -> tuple[Draft202012Validator, tuple[RuleSpec, ...]]:
    rules = RiskRule.objects.filter(tool_id=tool.pk, enabled=True).select_related("tier").order_by("name")
    specs = tuple(RuleSpec(r.name, r.description, r.tier.level, compile_validator(r.condition)) for r in rules)
    return compile_validator(tool.input_schema), specs


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
    validator, rules = compiled
    return ToolPolicy(
        name=tool.name,
        version=tool.version,
        base_tier=tool.base_tier.level,
        validator=validator,
        rules=rules,
        tiers=tiers if tiers is not None else tier_specs(),
    )
