"""The pure decision: given a tool's policy, a grant and arguments, what happens to a call.

`evaluate()` performs no database writes and reads no clock, so the same inputs
always give the same verdict: table-testable, and replayable for policy what-if.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Protocol

from jsonschema import Draft202012Validator

from audit.typealiases import JSONObject, JSONValue
from toolcatalog.schema import FieldError, argument_errors, compile_validator


@dataclass(frozen=True)
class TierSpec:
    level: int
    name: str
    requires_approval: bool
    approvals_required: int
    approval_window: timedelta


@dataclass(frozen=True)
class RuleSpec:
    name: str
    description: str
    tier: int
    validator: Draft202012Validator


@dataclass(frozen=True)
class ToolPolicy:
    """Everything evaluate() needs about one version of one tool."""

    name: str
    version: int
    base_tier: int
    validator: Draft202012Validator
    rules: Sequence[RuleSpec]
    tiers: Mapping[int, TierSpec]


class GrantLike(Protocol):
    @property
    def max_tier(self) -> int: ...


@dataclass(frozen=True)
class TierGrant:
    """A stand-in grant (admin's try-arguments, policy what-if): all `evaluate()` reads of a grant is its max tier."""

    max_tier: int


class Outcome:
    REFUSED = "refused"
    PENDING_APPROVAL = "pending_approval"
    APPROVED = "approved"


@dataclass(frozen=True)
class Verdict:
    outcome: str
    risk_tier: int | None = None
    risk_reasons: list[JSONObject] = field(default_factory=list)
    approvals_required: int = 0
    approval_window: timedelta | None = None
    error_code: str | None = None
    message: str = ""
    errors: list[FieldError] = field(default_factory=list)

    @property
    def refused(self) -> bool:
        return self.outcome == Outcome.REFUSED


def compile_policy(
    *,
    name: str,
    version: int,
    base_tier: int,
    input_schema: JSONObject,
    rules: Sequence[tuple[str, str, int, JSONObject]],
    tiers: Mapping[int, TierSpec],
) -> ToolPolicy:
    """Build a policy from plain values (saved or not): rules are (name, description, tier, condition)."""
    return ToolPolicy(
        name=name,
        version=version,
        base_tier=base_tier,
        validator=compile_validator(input_schema),
        rules=tuple(RuleSpec(n, d, t, compile_validator(c)) for n, d, t, c in rules),
        tiers=tiers,
    )


def classify(tool: ToolPolicy, arguments: JSONObject) -> tuple[int, list[JSONObject]]:
    """Return the call's tier and the enabled rules that raised it (step 3)."""
    tier, reasons = tool.base_tier, []
    for rule in tool.rules:
        if rule.validator.is_valid(arguments):
            reasons.append({"rule": rule.name, "description": rule.description, "tier": rule.tier})
            tier = max(tier, rule.tier)
    return tier, reasons


def evaluate(tool: ToolPolicy, grant: GrantLike | None, arguments: JSONValue) -> Verdict:
    """Decide a proposal: steps 1–5 of the pipeline, with no side effects."""
    if grant is None:
        return Verdict(
            Outcome.REFUSED,
            error_code="unknown_or_not_permitted_tool",
            message="No tool by that name is available to this agent.",
        )
    errors = argument_errors(tool.validator, arguments)
    if errors:
        return Verdict(
            Outcome.REFUSED,
            error_code="invalid_arguments",
            message=f"The arguments do not match the schema of '{tool.name}': fix the fields listed.",
            errors=errors,
        )
    tier, reasons = classify(tool, arguments)
    if tier > grant.max_tier:
        return Verdict(
            Outcome.REFUSED,
            risk_tier=tier,
            risk_reasons=reasons,
            error_code="permission_denied",
            message=f"This call is risk tier {tier}; this agent may propose '{tool.name}' up to tier {grant.max_tier}.",
        )
    spec = tool.tiers[tier]
    outcome = Outcome.PENDING_APPROVAL if spec.requires_approval else Outcome.APPROVED
    return Verdict(
        outcome,
        risk_tier=tier,
        risk_reasons=reasons,
        approvals_required=spec.approvals_required if spec.requires_approval else 0,
        approval_window=spec.approval_window,
    )
