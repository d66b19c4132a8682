"""What reviewers (and the clock) do to a pending call: approve, reject, edit, expire.

A mixin of ToolCall. Decisions on one call are serialised by a row lock; each state
change is still a compare-and-set that writes its audit event in the same transaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from approvals.duties import DecisionRefused, Seen, check_may_decide
from approvals.states import AGENT_DEACTIVATED, SYSTEM, WITHDRAWABLE_STATUSES, DecisionKind, Status
from audit.models import ActorKind

if TYPE_CHECKING:
    from approvals.models import Decision, ToolCall


class ReviewActions:
    """approve / reject / edit_arguments / expire, for ToolCall."""

    def _locked(self) -> ToolCall:
        """Return this call re-read under a row lock (decisions on one call are serialised).

        Only the call's row: locking its agent too would make a deactivation (which holds
        the agent's row, then locks its calls to withdraw them) and an approval deadlock.
        """
        return type(self).objects.select_for_update(of=("self",)).select_related("agent", "tool").get(pk=self.pk)

    def _decision(
        self, reviewer: AbstractBaseUser, kind: str, reason: str = "", *, arguments_hash: str | None = None
    ) -> Decision:
        """Record a reviewer's act, bound to the call's arguments (an edit: to the arguments it proposed)."""
        return self.decisions.model.objects.create(
            call=self,
            reviewer=reviewer,
            reviewer_name=reviewer.get_username(),
            kind=kind,
            reason=reason,
            arguments_hash=arguments_hash or self.arguments_hash,
            tool_version=self.tool_version,
        )

    def approver_names(self) -> list[str]:
        """Return who approved the current arguments under the current tool version.

        Whoever edited the call into these arguments proposed them, so their approval of
        them never counts (an edit back to arguments they had approved earlier included).
        """
        editors = self.decisions.filter(kind=DecisionKind.EDIT, arguments_hash=self.arguments_hash)
        names = (
            self.decisions.filter(
                kind=DecisionKind.APPROVE, arguments_hash=self.arguments_hash, tool_version=self.tool_version
            )
            .exclude(reviewer_name__in=editors.values("reviewer_name"))
            .values_list("reviewer_name", flat=True)
        )
        return sorted(set(names))

    def approval_count(self) -> int:
        """Return how many distinct reviewers' approvals of the call as it stands count."""
        return len(self.approver_names())

    def approve(self, reviewer: AbstractBaseUser, *, seen: Seen | None = None) -> bool:
        """Record `reviewer`'s approval; return True if the call is now approved to run.

        `seen`: what the reviewer's page showed; the approval is refused unless the call
        still has those arguments under that tool version. The approval binds both, and
        execution checks both. A reviewer whose approval already counts is told so
        (AlreadyApproved) and nothing is recorded.
        """
        from approvals.execution import enqueue_on_commit

        actor = (ActorKind.REVIEWER, reviewer.get_username())
        with transaction.atomic():
            call = self._locked()  # held until commit: no edit or re-judging slips in after these checks
            check_may_decide(call, reviewer, approving=True)
            if seen is not None:
                seen.check(call)
            call._decision(reviewer, DecisionKind.APPROVE)
            count = call.approval_count()
            call.audit(
                "call.approval_recorded",
                actor=actor,
                data={
                    "approvals": count,
                    "required": call.approvals_required,
                    "arguments_hash": call.arguments_hash,
                    "tool_version": call.tool_version,
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

    @classmethod
    def withdraw_calls_of(cls, agent_id: int) -> int:
        """Withdraw a deactivated agent's calls that wait for a reviewer or a worker; return how many.

        The rows are locked, so a concurrent approval or a worker's claim waits for this
        and then finds the call withdrawn; a call a worker already claimed (executing)
        runs to its end, and a finished one is left as it is.
        """
        with transaction.atomic():
            calls = (
                cls.objects.select_for_update(of=("self",))
                .select_related("agent", "tool")
                .filter(agent_id=agent_id, status__in=WITHDRAWABLE_STATUSES)
            )
            return sum(call.withdraw() for call in calls)

    def withdraw(self) -> bool:
        """Refuse this pending or approved call because its agent was deactivated; return whether this caller did."""
        error = {
            "error": AGENT_DEACTIVATED,
            "message": "The agent that proposed this call was deactivated, so the call was withdrawn: it will not run.",
        }
        return self.transition(
            WITHDRAWABLE_STATUSES,
            Status.REFUSED,
            actor=SYSTEM,
            action="call.withdrawn",
            data={"reason": AGENT_DEACTIVATED, "was": self.status, "error": error},
            error=error,
            finished_at=timezone.now(),
        )

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
            edited_hash = arguments_hash(arguments)
            # The editor proposed these arguments: the decision binds them, so their approval of them won't count.
            call._decision(reviewer, DecisionKind.EDIT, arguments_hash=edited_hash)
            fields = {
                "arguments": arguments,
                "arguments_hash": edited_hash,
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
