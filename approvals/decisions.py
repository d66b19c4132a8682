"""Who may decide a call: separation of duties, approver groups, expiry, what the reviewer saw.

Every refusal is a DecisionRefused with a sentence a reviewer can read.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import User
from django.utils import timezone

from approvals.approvers import group_refusal
from approvals.models import ToolCall
from approvals.states import DecisionKind, Status
from toolcatalog.models import RiskTier

REVIEW_PERMISSION = "approvals.review_toolcall"
ORDINALS = {2: "second", 3: "third"}


class DecisionRefused(Exception):
    """A reviewer may not make this decision; the message says why."""

    # How the console shows the refusal (a notice's tone).
    tone = "warning"


class AlreadyApproved(DecisionRefused):
    """The reviewer's approval of exactly this is already counted: nothing to do, and nothing is recorded."""

    tone = "info"


@dataclass(frozen=True)
class Seen:
    """What the page a reviewer decided on showed: the arguments' hash and the tool version they were judged under."""

    arguments_hash: str
    tool_version: int | None

    def check(self, call: ToolCall) -> None:
        """Raise DecisionRefused unless `call` is still exactly what the reviewer was shown."""
        if not self.arguments_hash:
            raise DecisionRefused("Open the call's page and read its arguments before approving.")
        if call.arguments_hash != self.arguments_hash:
            raise DecisionRefused("The arguments changed since this page was drawn; read them again first.")
        if call.tool_version != self.tool_version:
            # The tool's endpoint, schema or rules may differ from what the page described.
            raise DecisionRefused(
                f"The tool “{call.tool.name}” changed (now version {call.tool_version}) since this page was drawn; "
                "read the call again first."
            )


def check_may_decide(call: ToolCall, reviewer: User, *, approving: bool) -> None:
    """Raise DecisionRefused unless `reviewer` may approve (or reject) `call` now."""
    if not reviewer.has_perm(REVIEW_PERMISSION):
        raise DecisionRefused("You are not a reviewer.")
    if call.status != Status.PENDING_APPROVAL:
        raise DecisionRefused(
            f"This call is no longer waiting for a decision (it is {call.get_status_display().lower()})."
        )
    if not call.agent.active:  # proposed just as its agent was deactivated: the withdrawal missed it
        raise DecisionRefused("The agent that proposed this call was deactivated; the call can no longer run.")
    if call.expires_at is not None and call.expires_at <= timezone.now():
        raise DecisionRefused("This call's approval window has passed; it can no longer be decided.")
    if call.agent.owner_id is not None and call.agent.owner_id == reviewer.pk:
        raise DecisionRefused("You own the agent that proposed this call; another reviewer must decide it.")
    if call.on_behalf_of_id is not None and call.on_behalf_of_id == reviewer.pk:
        raise DecisionRefused("The agent proposed this call on your behalf; another reviewer must decide it.")
    if approving:
        check_may_approve(call, reviewer)


def tier_of(call: ToolCall) -> RiskTier | None:
    """Return the risk tier the call was classified at, with its approver group; None if it has none."""
    if call.risk_tier is None:
        return None
    return RiskTier.objects.select_related("approver_group").filter(level=call.risk_tier).first()


def check_may_approve(call: ToolCall, reviewer: User) -> None:
    """Raise DecisionRefused unless `reviewer`'s approval of the call as it stands would count."""
    refusal = group_refusal(call, reviewer)  # the tool's approver groups for the tier, else the tier's
    if refusal:
        raise DecisionRefused(refusal)
    if proposed_these_arguments(call, reviewer):
        others = "two other reviewers" if call.approvals_required > 1 else "another reviewer"
        raise DecisionRefused(f"You edited these arguments, so you proposed them: {others} must approve them.")
    if has_approved(call, reviewer):
        raise AlreadyApproved(waiting_words(call))


def proposed_these_arguments(call: ToolCall, reviewer: User) -> bool:
    """Return whether `reviewer` edited the call into its current arguments (an edit binds what it proposed)."""
    return call.decisions.filter(kind=DecisionKind.EDIT, reviewer=reviewer, arguments_hash=call.arguments_hash).exists()


def has_approved(call: ToolCall, reviewer: User) -> bool:
    """Return whether `reviewer` approved the current arguments under the current tool version."""
    return call.approvals().filter(reviewer=reviewer).exists()


def waiting_words(call: ToolCall) -> str:
    """Return what a reviewer whose approval is counted reads while the call waits for others."""
    count, needed = call.approval_count(), max(call.approvals_required, 1)
    ordinal = ORDINALS.get(count + 1, "another")
    return f"You approved these arguments ({count} of {needed}). Waiting for a {ordinal} reviewer."
