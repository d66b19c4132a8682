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
class CumulativeSpec:
    """A cumulative limit: the window's total (a sum of one argument, or a count of calls) may not pass `over`."""

    name: str
    description: str
    tier: int
    sum_argument: str  # "": count calls
    per: str  # "agent", "resource" or "tool"
    window: timedelta
    over: int
    resource_argument: str = ""  # the tool's, for per="resource"
    rule_id: int | None = None  # the stored rule's (None: an unsaved rule, judged in a what-if)

    def amount(self, arguments: JSONValue) -> int | float | None:
        """Return what a call with `arguments` adds to the window (None: the rule does not apply to it)."""
        if not isinstance(arguments, Mapping):
            return None
        if self.per == "resource" and (not self.resource_argument or self.resource_argument not in arguments):
            return None
        if not self.sum_argument:
            return 1
        value = arguments.get(self.sum_argument)
        return value if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class Usage:
    """A window's total before the call being judged, read under the limit's lock, and whose window it is."""

    used: int | float
    scope: str  # the agent's name, the resource's value, or the tool's name


@dataclass(frozen=True)
class ToolPolicy:
    """Everything evaluate() needs about one version of one tool."""

    name: str
    version: int
    base_tier: int
    validator: Draft202012Validator
    rules: Sequence[RuleSpec]
    tiers: Mapping[int, TierSpec]
    cumulative: Sequence[CumulativeSpec] = ()


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
    cumulative: Sequence[CumulativeSpec] = (),
) -> ToolPolicy:
    """Build a policy from plain values (saved or not): rules are (name, description, tier, condition)."""
    return ToolPolicy(
        name=name,
        version=version,
        base_tier=base_tier,
        validator=compile_validator(input_schema),
        rules=tuple(RuleSpec(n, d, t, compile_validator(c)) for n, d, t, c in rules),
        tiers=tiers,
        cumulative=tuple(cumulative),
    )


def classify(
    tool: ToolPolicy, arguments: JSONObject, usage: Mapping[str, Usage] | None = None
) -> tuple[int, list[JSONObject]]:
    """Return the call's tier and the enabled rules that raised it (step 3).

    `usage`: each cumulative rule's window total before this call, by rule name; a
    rule without one is not judged (nothing read its window).
    """
    tier, reasons = tool.base_tier, []
    for rule in tool.rules:
        if rule.validator.is_valid(arguments):
            reasons.append({"rule": rule.name, "description": rule.description, "tier": rule.tier})
            tier = max(tier, rule.tier)
    for limit in tool.cumulative:
        reason = cumulative_reason(limit, arguments, (usage or {}).get(limit.name))
        if reason is not None:
            reasons.append(reason)
            tier = max(tier, limit.tier)
    return tier, reasons


def cumulative_reason(limit: CumulativeSpec, arguments: JSONObject, usage: Usage | None) -> JSONObject | None:
    """Return the reason `limit` raises this call (it takes the window's total over the limit), or None."""
    adding = limit.amount(arguments)
    if usage is None or adding is None or usage.used + adding <= limit.over:
        return None
    return {
        "rule": limit.name,
        "description": limit.description,
        "tier": limit.tier,
        "kind": "cumulative",
        "used": usage.used,
        "adding": adding,
        "over": limit.over,
        "per": limit.per,
        "scope": usage.scope,
        "window_seconds": int(limit.window.total_seconds()),
        "summary": usage_sentence(limit, usage, adding),
    }


def usage_sentence(limit: CumulativeSpec, usage: Usage, adding: int | float) -> str:
    """Return how much of a limit a window has used, as a reviewer reads it.

    "R$ 850,00 of R$ 1.000,00 used in 24 h by support-agent; this call adds R$ 300,00".
    """
    whose = {"agent": "by", "resource": "on", "tool": "by all calls of"}[limit.per]
    if limit.sum_argument:
        used, over, add = (_amount(limit.sum_argument, v) for v in (usage.used, limit.over, adding))
        return f"{used} of {over} used in {window_text(limit.window)} {whose} {usage.scope}; this call adds {add}"
    calls = f"{_number(usage.used)} of {limit.over} calls"
    return (
        f"{calls} made in {window_text(limit.window)} {whose} {usage.scope}; this call makes {_number(usage.used + 1)}"
    )


def _number(value: int | float) -> str:
    return f"{value:,}".replace(",", ".") if isinstance(value, int) or value.is_integer() else str(value)


def _amount(argument: str, value: int | float) -> str:
    """Return an amount as the console shows money: cents arguments (…_centavos) as R$."""
    if not argument.endswith("_centavos"):
        return _number(int(value) if float(value).is_integer() else value)
    units, cents = divmod(int(value), 100)
    return f"R$ {units:,}".replace(",", ".") + f",{cents:02d}"


def window_text(window: timedelta) -> str:
    """Return a window's length in its largest whole unit: "24 h", "30 min", "2 d", "90 s"."""
    seconds = int(window.total_seconds())
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds % size == 0 and seconds >= size and not (unit == "d" and seconds < 3 * 86400):
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def evaluate(
    tool: ToolPolicy, grant: GrantLike | None, arguments: JSONValue, usage: Mapping[str, Usage] | None = None
) -> Verdict:
    """Decide a proposal: steps 1–5 of the pipeline, with no side effects.

    `usage`: the window totals of the tool's cumulative limits (`classify`), read by the caller.
    """
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
    tier, reasons = classify(tool, arguments, usage)
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
