"""Who may decide a call: separation of duties, approver groups, expiry.

Every refusal is a DecisionRefused with a sentence a reviewer can read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from toolcatalog.models import RiskTier

if TYPE_CHECKING:
    from approvals.models import ToolCall

REVIEW_PERMISSION = "approvals.review_toolcall"


class DecisionRefused(Exception):
    """A reviewer may not make this decision; the message says why."""


def check_may_decide(call: ToolCall, reviewer: AbstractBaseUser, *, approving: bool) -> None:
    """Raise DecisionRefused unless `reviewer` may approve (or reject) `call` now."""
    if not reviewer.has_perm(REVIEW_PERMISSION):
        raise DecisionRefused("You are not a reviewer.")
    if call.status != "pending_approval":
        raise DecisionRefused(
            f"This call is no longer waiting for a decision (it is {call.get_status_display().lower()})."
        )
    if call.expires_at is not None and call.expires_at <= timezone.now():
        raise DecisionRefused("This call's approval window has passed; it can no longer be decided.")
    if call.agent.owner_id is not None and call.agent.owner_id == reviewer.pk:
        raise DecisionRefused("You own the agent that proposed this call; another reviewer must decide it.")
    if approving:
        tier = RiskTier.objects.select_related("approver_group").filter(level=call.risk_tier).first()
        group = tier.approver_group if tier else None
        if group is not None and not reviewer.groups.filter(pk=group.pk).exists():
            raise DecisionRefused(f"Calls at tier {call.risk_tier} may only be approved by members of “{group.name}”.")
