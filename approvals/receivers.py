"""No rug pulls: when the policy a pending call was judged by changes, judge it again.

`toolcatalog.signals.policy_changed` arrives after the change commits. Every
pending call it concerns is re-run through the pure `evaluate()` with the tool's
current version and the agent's current grant: its tier, reasons and approvals
required follow the new policy, its `tool_version` moves on (so approvals given
under the old version no longer count: a Decision binds the tool version), and a
call the new policy refuses is refused — each change audited with before/after.
"""

from __future__ import annotations

import logging
import uuid

from django.db import transaction
from django.db.models import F, QuerySet

from agents.models import Agent, Grant
from approvals import lifecycle, sensitive
from approvals.errors import ApiError
from approvals.models import ToolCall
from approvals.states import Status
from toolcatalog.policies import policy_for, tier_specs
from toolcatalog.policy import TierSpec, evaluate

log = logging.getLogger(__name__)


def on_policy_changed(
    sender: type, *, tool_id: int | None = None, agent_id: int | None = None, **kwargs: object
) -> None:
    """Receive `policy_changed`: judge again the pending calls it concerns."""
    changed = reevaluate_pending(tool_id=tool_id, agent_id=agent_id)
    if changed:
        log.info("policy change (tool=%s agent=%s): %d pending call(s) judged again", tool_id, agent_id, changed)


def pending_calls(*, tool_id: int | None, agent_id: int | None) -> QuerySet[ToolCall]:
    """Return the pending calls a policy change concerns.

    A change of one tool concerns only calls judged under an older version of it,
    so the several announcements of one save (tool, then each rule) cost one pass.
    """
    calls = ToolCall.objects.filter(status=Status.PENDING_APPROVAL)
    if tool_id is not None:
        calls = calls.filter(tool_id=tool_id).exclude(tool_version=F("tool__version"))
    if agent_id is not None:
        calls = calls.filter(agent_id=agent_id)
    return calls


def reevaluate_pending(*, tool_id: int | None = None, agent_id: int | None = None) -> int:
    """Judge the concerned pending calls under the current policy; return how many changed."""
    tiers = tier_specs()
    ids = list(pending_calls(tool_id=tool_id, agent_id=agent_id).values_list("pk", flat=True))
    return sum(reevaluate_call(pk, tiers) for pk in ids)


def reevaluate_call(pk: uuid.UUID, tiers: dict[int, TierSpec]) -> bool:
    """Judge one pending call again, under a row lock; return whether anything about it changed."""
    with transaction.atomic():
        call = ToolCall.objects.select_for_update(of=("self",)).select_related("tool__base_tier", "agent").get(pk=pk)
        if call.status != Status.PENDING_APPROVAL:
            return False  # decided meanwhile: the decision stands
        tool = call.tool
        grant = Grant.objects.filter(agent_id=call.agent_id, tool_id=tool.pk).first() if tool.enabled else None
        verdict = evaluate(policy_for(tool, tiers), grant, sensitive.real_arguments(call))
        if verdict.refused:
            prefix = "The policy changed while this call waited for approval, and now refuses it: "
            error = ApiError.from_verdict(verdict, prefix).body()
            return lifecycle.refuse_on_policy_change(call, verdict, tool.version, error)
        return lifecycle.rejudge(call, verdict, tool.version)


def on_agent_saved(
    sender: type, *, instance: Agent, update_fields: frozenset[str] | None = None, **kwargs: object
) -> None:
    """Receive `post_save` of an agent: a deactivated agent's waiting calls are withdrawn.

    In the saving transaction (the admin's change form and action are atomic), so the
    deactivation and the withdrawal commit together; saving an inactive agent again finds
    nothing left to withdraw.
    """
    if instance.active or (update_fields is not None and "active" not in update_fields):
        return
    withdrawn = lifecycle.withdraw_calls_of(instance.pk)
    if withdrawn:
        log.info("agent %s deactivated: %d waiting call(s) withdrawn", instance.name, withdrawn)
