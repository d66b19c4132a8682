"""Standing approvals: a reviewer approves a call and, with it, calls like it for a while.

A standing approval covers later proposals of the same tool by the same agent, under
the same tool version, at up to the tier it was given at, whose arguments match its
condition (a JSON Schema, prefilled from the call and edited by the reviewer). It
approves at most `max_uses` of them, until it expires (at most the tier's approval
window after it was given) or is revoked. A tier that takes two approvals (four-eyes)
takes two for a standing approval too: it covers nothing until a second reviewer
approves it. Tier 3 allows none unless the tier says so.

Each use is taken by one conditional UPDATE (uses + 1 where uses < max, not revoked,
not expired, active) in the transaction that stores the call, so concurrent
proposals never take more than `max_uses`, and a proposal that is not stored (a
replay, a spent budget) takes none. A call a cumulative limit raised is never
approved by a standing approval: limits apply on top.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from uuid import UUID

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from approvals.decisions import REVIEW_PERMISSION, DecisionRefused, tier_of
from approvals.models import StandingApproval, StandingApprover, ToolCall
from audit.chain import record
from audit.models import ActorKind
from audit.typealiases import JSONObject, JSONValue
from toolcatalog.models import RiskTier, Tool
from toolcatalog.policy import Outcome, Verdict
from toolcatalog.schema import compile_validator
from toolcatalog.schemacheck import schema_problems
from toolcatalog.sensitive import is_sensitive

MAX_USES = 1000
# Arguments no two calls share: a condition on them would match nothing later.
UNIQUE_ARGUMENTS = frozenset({"idempotency_key"})


@dataclass(frozen=True)
class Terms:
    """What a reviewer asks for when approving calls like this one."""

    condition: JSONObject
    max_uses: int
    lasts: timedelta


# ------------------------------------------------------------------ giving one


def refusal(tier: RiskTier | None) -> str | None:
    """Return why calls at `tier` may have no standing approval, or None if they may."""
    if tier is None or not tier.requires_approval:
        return "Calls at this tier run without approval: there is nothing to approve in advance."
    if tier.level >= 3 and not tier.allows_standing_approvals:
        return f"Tier {tier.level} ({tier.name}) allows no standing approvals."
    return None


def prefill(call: ToolCall) -> JSONObject:
    """Return a condition matching calls like `call`: numbers up to its values, other values equal to its own.

    Sensitive and per-call arguments (the idempotency key) are left out; the reviewer edits the rest.
    """
    properties = (call.tool.input_schema.get("properties") or {}) if isinstance(call.tool.input_schema, dict) else {}
    conditions: JSONObject = {}
    for name, value in (call.arguments or {}).items():
        if name in UNIQUE_ARGUMENTS or is_sensitive(properties.get(name)):
            continue
        if isinstance(value, int | float) and not isinstance(value, bool):
            conditions[name] = {"maximum": value}
        elif isinstance(value, str | bool):
            conditions[name] = {"const": value}
    return {"type": "object", "properties": conditions, "required": sorted(conditions)}


def check_terms(call: ToolCall, tier: RiskTier | None, terms: Terms, arguments: JSONObject) -> None:
    """Raise DecisionRefused unless a standing approval on these terms may be given from `call`.

    `arguments`: the call's real arguments; the condition must match them (calls *like this one*).
    """
    reason = refusal(tier)
    if reason is not None:
        raise DecisionRefused(reason)
    assert tier is not None
    if not 1 <= terms.max_uses <= MAX_USES:
        raise DecisionRefused(f"A standing approval allows 1 to {MAX_USES} uses.")
    if not timedelta(0) < terms.lasts <= tier.approval_window:
        raise DecisionRefused(f"A standing approval at tier {tier.level} lasts at most {tier.approval_window}.")
    problems = schema_problems(terms.condition)
    if problems:
        raise DecisionRefused("The condition is not a valid JSON Schema: " + "; ".join(problems))
    if not compile_validator(terms.condition).is_valid(arguments):
        raise DecisionRefused("The condition does not match this call's own arguments: it would cover no call like it.")


def grant(call: ToolCall, reviewer: User, terms: Terms, arguments: JSONObject) -> StandingApproval:
    """Give a standing approval from `call`, approved by `reviewer`, inside the approving transaction.

    The caller has checked that `reviewer` may approve the call. Active at once when the
    tier takes one approval; otherwise it waits for the tier's other approvers (`endorse`).
    """
    tier = tier_of(call)
    check_terms(call, tier, terms, arguments)
    assert tier is not None
    now = timezone.now()
    standing = StandingApproval.objects.create(
        agent=call.agent,
        tool=call.tool,
        tool_version=call.tool_version,
        risk_tier=tier.level,
        condition=terms.condition,
        max_uses=terms.max_uses,
        approvals_required=max(tier.approvals_required, 1),
        source_call=call,
        created_by_name=reviewer.get_username(),
        created_at=now,
        expires_at=now + terms.lasts,
    )
    data = {"condition": terms.condition, "max_uses": terms.max_uses, "expires_at": standing.expires_at.isoformat()}
    _audit(standing, "standing.granted", reviewer, {**data, "from_call": str(call.pk)}, call_id=call.pk)
    _add_approver(standing, reviewer, now)
    return standing


def endorse(standing_id: UUID, reviewer: User) -> StandingApproval:
    """Add `reviewer`'s approval to a standing approval that waits for the tier's approvals; return it."""
    with transaction.atomic():
        standing = locked(standing_id)
        check_may_endorse(standing, reviewer)
        _add_approver(standing, reviewer, timezone.now())
    return standing


def check_may_endorse(standing: StandingApproval, reviewer: User) -> None:
    """Raise DecisionRefused unless `reviewer`'s approval of the standing approval would count now."""
    if not reviewer.has_perm(REVIEW_PERMISSION):
        raise DecisionRefused("You are not a reviewer.")
    state = standing.state(timezone.now())
    if state != "waiting for approvals":
        raise DecisionRefused(f"This standing approval is {state}: there is nothing to approve.")
    if standing.approvers.filter(reviewer_name=reviewer.get_username()).exists():
        raise DecisionRefused("You approved this standing approval already; another reviewer must approve it.")
    if standing.agent.owner_id is not None and standing.agent.owner_id == reviewer.pk:
        raise DecisionRefused("You own the agent it covers; another reviewer must approve it.")
    tier = RiskTier.objects.select_related("approver_group").filter(level=standing.risk_tier).first()
    group = tier.approver_group if tier else None
    if group is not None and not reviewer.groups.filter(pk=group.pk).exists():
        raise DecisionRefused(f"Calls at tier {standing.risk_tier} may only be approved by members of “{group.name}”.")


def _add_approver(standing: StandingApproval, reviewer: User, now: datetime) -> None:
    """Record one approver; activate the standing approval once it has the tier's approvals."""
    StandingApprover.objects.create(standing=standing, reviewer=reviewer, reviewer_name=reviewer.get_username())
    count = standing.approvers.count()
    _audit(
        standing, "standing.approval_recorded", reviewer, {"approvals": count, "required": standing.approvals_required}
    )
    if count >= standing.approvals_required and standing.activated_at is None:
        StandingApproval.objects.filter(pk=standing.pk, activated_at__isnull=True).update(activated_at=now)
        standing.activated_at = now
        _audit(standing, "standing.activated", reviewer, {"approvers": approver_names(standing)})


def revoke(standing_id: UUID, reviewer: User) -> bool:
    """Revoke a standing approval at once; return whether this reviewer did (False: it was already revoked)."""
    if not reviewer.has_perm(REVIEW_PERMISSION):
        raise DecisionRefused("You are not a reviewer.")
    with transaction.atomic():
        standing = locked(standing_id)
        now = timezone.now()
        name = reviewer.get_username()
        rows = StandingApproval.objects.filter(pk=standing.pk, revoked_at__isnull=True)
        if not rows.update(revoked_at=now, revoked_by_name=name):
            return False
        standing.revoked_at, standing.revoked_by_name = now, name
        _audit(standing, "standing.revoked", reviewer, {"uses": standing.uses, "max_uses": standing.max_uses})
    return True


def locked(standing_id: UUID) -> StandingApproval:
    """Return the standing approval re-read under a row lock."""
    rows = StandingApproval.objects.select_for_update(of=("self",)).select_related("agent", "tool")
    try:
        return rows.get(pk=standing_id)
    except (StandingApproval.DoesNotExist, ValueError) as missing:
        raise DecisionRefused("No such standing approval.") from missing


def approver_names(standing: StandingApproval) -> list[str]:
    return list(standing.approvers.values_list("reviewer_name", flat=True))


def _audit(
    standing: StandingApproval, action: str, reviewer: User, data: JSONObject, call_id: UUID | None = None
) -> None:
    record(
        action,
        actor=(ActorKind.REVIEWER, reviewer.get_username()),
        call_id=call_id,
        agent_name=standing.agent.name,
        tool_name=standing.tool.name,
        data={"standing_approval": str(standing.pk), **data},
    )


# ------------------------------------------------------------------ using one


def may_cover(agent_id: int, tool: Tool, now: datetime) -> bool:
    """Return whether any standing approval could cover a call of `agent_id` to this version of `tool` now.

    A read before the storing transaction, so proposals no standing approval could cover
    keep the store's one-message path; the use itself is decided in that transaction.
    """
    return _usable(agent_id, tool.pk, tool.version, now).exists()


def _usable(agent_id: int, tool_id: int, tool_version: int, now: datetime) -> QuerySet[StandingApproval]:
    return StandingApproval.objects.filter(
        agent_id=agent_id,
        tool_id=tool_id,
        tool_version=tool_version,
        activated_at__isnull=False,
        revoked_at__isnull=True,
        expires_at__gt=now,
        uses__lt=F("max_uses"),
    )


def use(call: ToolCall, verdict: Verdict, arguments: JSONObject, now: datetime) -> StandingApproval | None:
    """Inside the storing transaction: take one use of a standing approval that covers this call, if any.

    `arguments`: the real values the condition is matched against. The use is one
    conditional UPDATE; a standing approval revoked, expired or used up meanwhile
    changes no row and is passed over.
    """
    if not covers(verdict):
        return None
    candidates = _usable(call.agent_id, call.tool_id, call.tool_version, now).filter(risk_tier__gte=verdict.risk_tier)
    for standing in candidates.order_by("expires_at"):
        if not compile_validator(standing.condition).is_valid(arguments):
            continue
        taken = _usable(call.agent_id, call.tool_id, call.tool_version, now).filter(pk=standing.pk)
        if taken.update(uses=F("uses") + 1):
            standing.uses += 1
            return standing
    return None


def covers(verdict: Verdict) -> bool:
    """Return whether a standing approval may approve a call so judged: held for approval, no limit passed."""
    passed_limit = any(reason.get("kind") == "cumulative" for reason in verdict.risk_reasons)
    return verdict.outcome == Outcome.PENDING_APPROVAL and not passed_limit


def approved_by(verdict: Verdict, standing: StandingApproval) -> Verdict:
    """Return `verdict` as approved by `standing`, citing it among the reasons."""
    names = ", ".join(approver_names(standing))
    summary = (
        f"Approved by the standing approval of {names} (use {standing.uses} of {standing.max_uses}, "
        f"until {standing.expires_at:%Y-%m-%d %H:%M} UTC)"
    )
    reason: JSONObject = {
        "rule": "standing approval",
        "kind": "standing",
        "standing_approval": str(standing.pk),
        "tier": verdict.risk_tier,
        "summary": summary,
    }
    return replace(
        verdict, outcome=Outcome.APPROVED, approvals_required=0, risk_reasons=[*verdict.risk_reasons, reason]
    )


def record_use(call: ToolCall, standing: StandingApproval) -> None:
    """Audit one use, citing the call, inside the transaction that stored it."""
    names: list[JSONValue] = list(approver_names(standing))
    data: JSONObject = {
        "standing_approval": str(standing.pk),
        "uses": standing.uses,
        "max_uses": standing.max_uses,
        "approvers": names,
    }
    record(
        "standing.used",
        actor=(ActorKind.SYSTEM, "gatehouse"),
        call_id=call.pk,
        agent_name=call.agent.name,
        tool_name=call.tool.name,
        data=data,
    )


def listed() -> list[StandingApproval]:
    """Return standing approvals for the console: the latest 200, newest first, with their approvers."""
    rows = StandingApproval.objects.select_related("agent", "tool").prefetch_related("approvers")
    return list(rows.order_by("-created_at")[:200])
