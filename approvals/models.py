"""Tool calls and the decisions people make about them.

Every state change is a compare-and-set (`UPDATE … WHERE status = expected`) that
writes its audit event in the same transaction; effects outside the database
(enqueueing execution) are scheduled on commit.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import models, transaction
from django.utils import timezone

from agents.models import Agent
from approvals.duties import DecisionRefused, check_may_decide
from audit.chain import record
from audit.models import ActorKind
from toolcatalog.models import Tool

if TYPE_CHECKING:
    from toolcatalog.executors import Verification
    from toolcatalog.policy import Verdict

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


class ToolCall(models.Model):
    """One proposal of one agent to call one tool, and everything that happened to it."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="calls")
    tool = models.ForeignKey(Tool, on_delete=models.PROTECT, related_name="calls")
    tool_version = models.PositiveIntegerField(help_text="The tool version the call was judged under.")
    arguments = models.JSONField()
    arguments_hash = models.CharField(max_length=64, help_text="SHA-256 of the canonical arguments.")
    original_arguments = models.JSONField(
        null=True, blank=True, help_text="The agent's arguments, when a reviewer edited them."
    )
    request_hash = models.CharField(
        max_length=64, help_text="SHA-256 of tool and arguments as proposed: what idempotency compares."
    )
    # NULL, not "", so the unique constraint ignores calls without a key.
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    conversation_id = models.CharField(max_length=200, blank=True)
    step = models.IntegerField(null=True, blank=True)
    call_index = models.IntegerField(null=True, blank=True)
    justification = models.TextField(blank=True)
    status = models.CharField(max_length=24, choices=Status.choices)
    risk_tier = models.PositiveSmallIntegerField(null=True, blank=True)
    risk_reasons = models.JSONField(default=list, blank=True)
    approvals_required = models.PositiveSmallIntegerField(default=0)
    error = models.JSONField(null=True, blank=True)
    preview = models.JSONField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    approved_arguments_hash = models.CharField(max_length=64, blank=True)
    approved_tool_version = models.PositiveIntegerField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    decided_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        permissions = [("review_toolcall", "Can work the review queue and decide calls")]
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "idempotency_key"],
                condition=models.Q(idempotency_key__isnull=False),
                name="toolcall_unique_idempotency_key_per_agent",
            )
        ]
        indexes = [
            models.Index(fields=["status", "-risk_tier", "created_at"], name="toolcall_queue"),
            models.Index(fields=["agent", "conversation_id", "tool", "created_at"], name="toolcall_conversation"),
            models.Index(fields=["created_at"], name="toolcall_created"),
        ]

    def __str__(self) -> str:
        return f"{self.tool.name} by {self.agent.name} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def is_settled(self) -> bool:
        return self.status in SETTLED_STATUSES

    def audit(self, action: str, *, actor: tuple[str, str], data: dict[str, Any] | None = None) -> None:
        """Write an audit event about this call (inside the caller's transaction)."""
        record(
            action,
            actor=actor,
            call_id=self.pk,
            agent_name=self.agent.name,
            tool_name=self.tool.name,
            data=data,
        )

    def transition(
        self,
        expected: str | tuple[str, ...],
        to: str,
        *,
        actor: tuple[str, str],
        action: str,
        data: dict[str, Any] | None = None,
        **fields: Any,
    ) -> bool:
        """Move from `expected` to `to` if, and only if, the row is still in `expected`.

        Returns whether this caller won. The audit event commits with the change.
        """
        allowed = (expected,) if isinstance(expected, str) else expected
        with transaction.atomic():
            changed = ToolCall.objects.filter(pk=self.pk, status__in=allowed).update(status=to, **fields)
            if not changed:
                return False
            self.status = to
            for name, value in fields.items():
                setattr(self, name, value)
            self.audit(action, actor=actor, data={"from": list(allowed), "to": to, **(data or {})})
        return True

    def _locked(self) -> ToolCall:
        """Return this call re-read under a row lock (decisions on one call are serialised)."""
        return ToolCall.objects.select_for_update().select_related("agent", "tool").get(pk=self.pk)

    def _decision(self, reviewer: AbstractBaseUser, kind: str, reason: str = "") -> Decision:
        return Decision.objects.create(
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
            won = ToolCall.objects.filter(pk=self.pk, status=Status.PENDING_APPROVAL, expires_at__lte=now).update(
                status=Status.EXPIRED, error=error, finished_at=now
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

    # ----------------------------------------------------------------- Execution
    # One attempt: claim (approved → executing, attempts + 1, a lease) → the executor,
    # outside any transaction → record_result → finish (succeeded or
    # needs_reconciliation), or fail_attempt (back to approved for a retry, or failed).
    # Each step is a compare-and-set on status *and* attempt number, so a worker whose
    # lease the sweeper took back can no longer write anything. On an *approved* call,
    # lease_expires_at means "not before": the sweeper leaves the call alone until then
    # (a retry's backoff, or a message it has just re-sent).

    WORKER = (ActorKind.SYSTEM, "worker")
    SWEEPER = (ActorKind.SYSTEM, "sweeper")

    def _execution_step(
        self,
        expected: str,
        to: str,
        *,
        action: str,
        actor: tuple[str, str],
        data: dict[str, Any] | None = None,
        where: dict[str, Any] | None = None,
        **fields: Any,
    ) -> bool:
        """Compare-and-set from (`expected`, this attempt number) to `to`; audit in the same transaction.

        Returns whether this caller won.
        """
        with transaction.atomic():
            matching = ToolCall.objects.filter(pk=self.pk, status=expected, attempts=self.attempts, **(where or {}))
            if not matching.update(status=to, **fields):
                return False
            self.status = to
            for name, value in fields.items():
                setattr(self, name, value)
            self.audit(action, actor=actor, data={"from": expected, "to": to, "attempt": self.attempts, **(data or {})})
        return True

    def claim(self, lease: timedelta) -> bool:
        """Start an attempt (approved → executing, holding a lease); return False if another delivery won."""
        expires = timezone.now() + lease
        return self._execution_step(
            Status.APPROVED,
            Status.EXECUTING,
            action="call.execution_started",
            actor=self.WORKER,
            data={"lease_expires_at": expires.isoformat()},
            attempts=self.attempts + 1,
            lease_expires_at=expires,
        )

    def return_for_approval(self, verdict: Verdict, tool_version: int) -> bool:
        """The tool changed after approval: back to pending_approval under its current policy.

        Returns whether this caller did it. Approvals bind the old tool version, so
        they no longer count: the call waits for a fresh approval (at least one).
        """
        now = timezone.now()
        return self._execution_step(
            Status.EXECUTING,
            Status.PENDING_APPROVAL,
            action="call.returned_for_approval",
            actor=self.WORKER,
            data={
                "approved_tool_version": self.approved_tool_version,
                "tool_version": tool_version,
                "risk_tier_before": self.risk_tier,
                "risk_tier_after": verdict.risk_tier,
                "risk_reasons": verdict.risk_reasons,
            },
            tool_version=tool_version,
            risk_tier=verdict.risk_tier,
            risk_reasons=verdict.risk_reasons,
            approvals_required=max(verdict.approvals_required, 1),
            decided_at=None,
            expires_at=now + verdict.approval_window,
            approved_arguments_hash="",
            approved_tool_version=None,
            lease_expires_at=None,
            preview=None,
        )

    def refuse_on_recheck(self, error: dict[str, Any]) -> bool:
        """The current policy refuses what was approved under an older one: executing → refused."""
        return self._execution_step(
            Status.EXECUTING,
            Status.REFUSED,
            action="call.refused_on_recheck",
            actor=self.WORKER,
            data={"error": error},
            error=error,
            finished_at=timezone.now(),
            lease_expires_at=None,
        )

    def record_result(self, result: dict[str, Any]) -> bool:
        """Store what the downstream answered (still executing: verification comes next); return whether stored."""
        return self._execution_step(
            Status.EXECUTING,
            Status.EXECUTING,
            action="call.executed",
            actor=self.WORKER,
            data={"result": result},
            result=result,
        )

    def finish(self, verification: Verification) -> bool:
        """End the attempt by what reading the downstream back showed: succeeded or needs_reconciliation."""
        confirmed = bool(verification.confirmed)
        error = None
        if not confirmed:
            error = {
                "error": "needs_reconciliation",
                "message": "The effect could not be confirmed downstream; a person must reconcile this call.",
                "detail": verification.detail,
                "observed": verification.observed,
            }
        return self._execution_step(
            Status.EXECUTING,
            Status.SUCCEEDED if confirmed else Status.NEEDS_RECONCILIATION,
            action="call.succeeded" if confirmed else "call.needs_reconciliation",
            actor=self.WORKER,
            data={"observed": verification.observed, "detail": verification.detail},
            error=error,
            finished_at=timezone.now(),
            lease_expires_at=None,
        )

    def fail_attempt(self, error: dict[str, Any], retry_at: datetime | None) -> bool:
        """End a failed attempt: back to approved until `retry_at`, or failed when None; return whether done."""
        if retry_at is not None:
            return self._execution_step(
                Status.EXECUTING,
                Status.APPROVED,
                action="call.retry_scheduled",
                actor=self.WORKER,
                data={"error": error, "retry_at": retry_at.isoformat()},
                error=error,
                lease_expires_at=retry_at,
            )
        return self._execution_step(
            Status.EXECUTING,
            Status.FAILED,
            action="call.failed",
            actor=self.WORKER,
            data={"error": error},
            error=error,
            finished_at=timezone.now(),
            lease_expires_at=None,
        )

    def requeue(self, not_before: datetime) -> bool:
        """Mark an approved call nobody claimed as re-sent (the caller enqueues it); return whether this sweeper won."""
        return self._execution_step(
            Status.APPROVED,
            Status.APPROVED,
            action="call.requeued",
            actor=self.SWEEPER,
            where={"lease_expires_at": self.lease_expires_at},
            lease_expires_at=not_before,
        )

    def release_expired_lease(self, *, now: datetime, can_repeat: bool) -> bool:
        """Take back an attempt whose lease ran out by `now` (its worker vanished); return whether this sweeper did.

        `can_repeat`: the downstream gets the same idempotency key again, so running the
        attempt again cannot duplicate its effect → approved, due at once (the sweeper
        re-sends it). Otherwise the effect is unknown → needs_reconciliation, for a person.
        """
        where = {"lease_expires_at__lte": now}
        data = {"lease_expires_at": self.lease_expires_at.isoformat() if self.lease_expires_at else None}
        if can_repeat:
            return self._execution_step(
                Status.EXECUTING,
                Status.APPROVED,
                action="call.lease_expired",
                actor=self.SWEEPER,
                data={**data, "next": "run again with the same idempotency key"},
                where=where,
                lease_expires_at=now,
            )
        error = {
            "error": "needs_reconciliation",
            "message": "The worker stopped during an attempt that may not run again (its downstream does not "
            "dedupe by idempotency key, or its attempts are spent); a person must check the downstream.",
        }
        return self._execution_step(
            Status.EXECUTING,
            Status.NEEDS_RECONCILIATION,
            action="call.lease_expired",
            actor=self.SWEEPER,
            data={**data, "next": "needs_reconciliation"},
            where=where,
            error=error,
            finished_at=now,
            lease_expires_at=None,
        )


class DecisionKind(models.TextChoices):
    APPROVE = "approve", "Approve"
    REJECT = "reject", "Reject"
    EDIT = "edit", "Edit arguments"


class Decision(models.Model):
    """A reviewer's act on a call, bound to the exact arguments and tool version they saw."""

    call = models.ForeignKey(ToolCall, on_delete=models.CASCADE, related_name="decisions")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    reviewer_name = models.CharField(max_length=150)
    kind = models.CharField(max_length=16, choices=DecisionKind.choices)
    reason = models.TextField(blank=True)
    arguments_hash = models.CharField(max_length=64)
    tool_version = models.PositiveIntegerField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            # One reviewer approving the same arguments under the same tool version twice counts once.
            models.UniqueConstraint(
                fields=["call", "reviewer", "arguments_hash", "tool_version"],
                condition=models.Q(kind="approve"),
                name="decision_one_approval_per_reviewer",
            )
        ]

    def __str__(self) -> str:
        return f"{self.reviewer_name} {self.kind} {self.call_id}"
