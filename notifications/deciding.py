"""A decision made from a message (an email link, a Slack button), bound and judged exactly as the console's.

The binding the message carried (call id, arguments hash, tool version) must still
hold; then `approvals.lifecycle` applies every console rule under the call's row lock:
permission for the tier, four-eyes, the owner cannot approve, expiry, what was seen.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import User

from approvals import lifecycle
from approvals.decisions import AlreadyApproved, DecisionRefused
from approvals.models import ToolCall
from approvals.views.decisions import approve_as_seen
from notifications import render
from notifications.links import Bound

APPROVE, REJECT = "approve", "reject"


@dataclass(frozen=True)
class Outcome:
    """What a decision from a message came to: whether it counted, and a sentence for the person."""

    counted: bool
    text: str


def changed_since(call: ToolCall, bound: Bound) -> str:
    """Return why the call is not what the message showed ("" if it still is)."""
    if call.arguments_hash != bound.arguments_hash:
        return "Its arguments changed since this message was sent."
    if call.tool_version != bound.tool_version:
        return f"Its tool “{call.tool.name}” changed (now version {call.tool_version}) since this message was sent."
    return ""


def decide(bound: Bound, user: User, action: str, reason: str = "") -> Outcome:
    """Approve or reject the bound call as `user`; refused (with the reason) unless every console rule holds."""
    call = ToolCall.objects.select_related("agent", "tool").filter(pk=bound.call_id).first()
    if call is None:
        return Outcome(False, "Refused: no such call.")
    changed = changed_since(call, bound)
    if changed:
        return Outcome(False, f"Refused: {changed} Read it again: {render.card(call).call_url}")
    try:
        if action == APPROVE:
            return Outcome(True, approve_as_seen(call, user, bound.seen))
        if action == REJECT:
            lifecycle.reject(call, user, reason)
            return Outcome(True, "Rejected. The agent receives the reason.")
    except AlreadyApproved as waiting:
        return Outcome(False, str(waiting))
    except DecisionRefused as refused:
        return Outcome(False, f"Refused: {refused}")
    return Outcome(False, "Refused: unknown action.")
