"""The states a tool call moves through, and the kinds of decision people make."""

from __future__ import annotations

from django.db import models

from audit.models import ActorKind

SYSTEM = (ActorKind.SYSTEM, "gatehouse")


class Status(models.TextChoices):
    REFUSED = "refused", "Refused"
    PENDING_APPROVAL = "pending_approval", "Pending approval"
    REJECTED = "rejected", "Rejected"
    EXPIRED = "expired", "Expired"
    APPROVED = "approved", "Approved"
    EXECUTING = "executing", "Executing"
    SUCCEEDED = "succeeded", "Succeeded"
    NEEDS_RECONCILIATION = "needs_reconciliation", "Needs reconciliation"
    FAILED = "failed", "Failed"


TERMINAL_STATUSES = frozenset(
    {Status.REFUSED, Status.REJECTED, Status.EXPIRED, Status.SUCCEEDED, Status.NEEDS_RECONCILIATION, Status.FAILED}
)
# States where nothing more happens until a person acts (or the call is done).
SETTLED_STATUSES = TERMINAL_STATUSES | {Status.PENDING_APPROVAL}

# A deactivated agent's calls that nothing has started yet: they are refused with this error code.
# Not a status of its own: like a policy change that refuses a waiting call, it is the policy saying no.
AGENT_DEACTIVATED = "agent_deactivated"
WITHDRAWABLE_STATUSES = (Status.PENDING_APPROVAL, Status.APPROVED)


class DecisionKind(models.TextChoices):
    APPROVE = "approve", "Approve"
    REJECT = "reject", "Reject"
    EDIT = "edit", "Edit arguments"
