"""What reviewers (and the clock) do to a pending call: approve, reject, edit, expire.

A mixin of ToolCall. Decisions on one call are serialised by a row lock; each state
change is still a compare-and-set that writes its audit event in the same transaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from approvals.duties import DecisionRefused, check_may_decide
from approvals.states import SYSTEM, DecisionKind, Status
from audit.models import ActorKind

if TYPE_CHECKING:
    from approvals.models import Decision, ToolCall


class ReviewActions:
    """approve / reject / edit_arguments / expire, for ToolCall."""

    def _locked(self) -> ToolCall:
        """Return this call re-read under a row lock (decisions on one call are serialised)."""
        return type(self).objects.select_for_update().select_related("agent", "tool").get(pk=self.pk)

    def _decision(self, reviewer: AbstractBaseUser, kind: str, reason: str = "") -> Decision:
        return self.decisions.model.objects.create(
            call=self,
            reviewer=reviewer,
            reviewer_name=reviewer.get_username(),
            kind=kind,
            reason=reason,
            arguments_hash=self.arguments_hash,
            tool_version=self.tool_version,
        )

    def approval_count(self) -> int:
        """Return how many distinct reviewers approved the current arguments under the current tool version."""
        return (
            self.decisions.filter(
                kind=DecisionKind.APPROVE, arguments_hash=self.arguments_hash, tool_version=self.tool_version
            )
            .values("reviewer_name")
            .distinct()
            .count()
        )

    def approve(self, reviewer: AbstractBaseUser) -> bool:
        """Record `reviewer`'s approval; return True if the call is now approved to run.

        One reviewer approving twice counts once. The approval binds the hash of the
        arguments and the tool version the reviewer saw; execution checks both.
        """
        from approvals.execution import enqueue_on_commit

        actor = (ActorKind.REVIEWER, reviewer.get_username())
        with transaction.atomic():
            call = self._locked()
            check_may_decide(call, reviewer, approving=True)
            # An approval of an older tool version is not this approval: the reviewer approves again.
            already = call.decisions.filter(
                kind=DecisionKind.APPROVE,
                reviewer=reviewer,
                arguments_hash=call.arguments_hash,
                tool_version=call.tool_version,
            ).exists()
            if not already:
                call._decision(reviewer, DecisionKind.APPROVE)
            count = call.approval_count()
            call.audit(
                "call.approval_recorded",
                actor=actor,
                data={
                    "approvals": count,
                    "required": call.approvals_required,
                    "repeat": already,
                    "arguments_hash": call.arguments_hash,
                },
            )
            if count < max(call.approvals_required, 1):
                return False
            won = call.transition(
                Status.PENDING_APPROVAL,
                Status.APPROVED,
                actor=actor,
                action="call.approved",
                data={"approvals": count, "arguments_hash": call.arguments_hash, "tool_version": call.tool_version},
                decided_at=timezone.now(),
                approved_arguments_hash=call.arguments_hash,
                approved_tool_version=call.tool_version,
            )
            if won:
                enqueue_on_commit(call)
        self.refresh_from_db()
        return won

    def reject(self, reviewer: AbstractBaseUser, reason: str) -> bool:
        """Reject the call with a reason the agent will receive; return whether this caller decided it."""
        reason = reason.strip()
        if not reason:
            raise DecisionRefused("Give a reason: the agent receives it.")
        actor = (ActorKind.REVIEWER, reviewer.get_username())
        with transaction.atomic():
            call = self._locked()
            check_may_decide(call, reviewer, approving=False)
            call._decision(reviewer, DecisionKind.REJECT, reason)
            now = timezone.now()
            error = {"error": "rejected", "message": f"A reviewer rejected this call: {reason}", "reason": reason}
            won = call.transition(
                Status.PENDING_APPROVAL,
                Status.REJECTED,
                actor=actor,
                action="call.rejected",
                data={"reason": reason},
                error=error,
                decided_at=now,
                finished_at=now,
            )
        self.refresh_from_db()
        return won

    def expire(self) -> bool:
        """Expire a pending call whose approval window has passed; return whether this caller did."""
        now = timezone.now()
        error = {"error": "expired", "message": "No reviewer approved this call within its approval window."}
        with transaction.atomic():
            won = (
                type(self)
                .objects.filter(pk=self.pk, status=Status.PENDING_APPROVAL, expires_at__lte=now)
                .update(status=Status.EXPIRED, error=error, finished_at=now)
            )
            if won:
                self.status, self.error, self.finished_at = Status.EXPIRED, error, now
                self.audit(
                    "call.expired",
                    actor=SYSTEM,
                    data={"expires_at": self.expires_at.isoformat() if self.expires_at else None},
                )
        return bool(won)

    def edit_arguments(self, reviewer: AbstractBaseUser, arguments: dict[str, Any], verdict: Any) -> None:
        """Replace the arguments with a reviewer's edit, already re-validated and re-classified as `verdict`.

        Earlier approvals were of other arguments, so they no longer count; the call
        stays pending until the edited arguments are approved.
        """
        from approvals.pipeline import arguments_hash

        actor = (ActorKind.REVIEWER, reviewer.get_username())
        with transaction.atomic():
            call = self._locked()
            check_may_decide(call, reviewer, approving=False)
            before = call.arguments
            call._decision(reviewer, DecisionKind.EDIT)
            fields = {
                "arguments": arguments,
                "arguments_hash": arguments_hash(arguments),
                "original_arguments": call.original_arguments or before,
                "risk_tier": verdict.risk_tier,
                "risk_reasons": verdict.risk_reasons,
                # A person changed what will run, so a person approves the result.
                "approvals_required": max(verdict.approvals_required, 1),
            }
            changed = call.transition(
                Status.PENDING_APPROVAL,
                Status.PENDING_APPROVAL,
                actor=actor,
                action="call.arguments_edited",
                data={
                    "before": before,
                    "after": arguments,
                    "risk_tier_before": call.risk_tier,
                    "risk_tier_after": verdict.risk_tier,
                },
                **fields,
            )
            if not changed:
                raise DecisionRefused("This call is no longer waiting for a decision.")
        self.refresh_from_db()
