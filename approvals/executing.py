"""One attempt at an approved call, as compare-and-set steps on the call's row.

A mixin of ToolCall; `approvals.execution` and `approvals.tasks` drive it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from django.db import transaction
from django.utils import timezone

from agents.models import column_list, instance_from_row
from approvals.rows import (
    call_from_row,
    claim_statement,
    compare_and_set,
    compare_and_set_statement,
    with_tool_and_agent_columns,
)
from approvals.serializers import call_body
from approvals.states import SETTLED_STATUSES, Status
from approvals.watch import announce, can_tell
from audit.chain import new_event, one_message_possible, record_if_changed
from audit.models import ActorKind

if TYPE_CHECKING:
    from approvals.models import ToolCall
    from toolcatalog.executors import Verification
    from toolcatalog.policy import Verdict


@dataclass(frozen=True)
class Sent:
    """What an execution message says of its call when it was sent (see `ExecutionSteps.claim_as_sent`)."""

    attempts: int
    agent: str
    tool: str

    @classmethod
    def of(cls, call: ToolCall) -> Sent:
        return cls(attempts=call.attempts, agent=call.agent.name, tool=call.tool.name)


class ExecutionSteps:
    """claim / record_result / finish / fail_attempt / requeue / release_expired_lease, for ToolCall."""

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
        return self._step(expected, to, [(action, to, data)], actor=actor, where=where, fields=fields)

    def _step(
        self,
        expected: str,
        to: str,
        events: list[tuple[str, str, dict[str, Any] | None]],
        *,
        actor: tuple[str, str],
        where: dict[str, Any] | None,
        fields: dict[str, Any],
    ) -> bool:
        """`_execution_step` with one event or several, each as (action, the status it tells of, data)."""
        attempt = fields.get("attempts", self.attempts)
        audits = [
            (action, {"from": expected, "to": told, "attempt": attempt, **(data or {})})
            for action, told, data in events
        ]
        current = {"status": expected, "attempts": self.attempts}
        if where is None and one_message_possible():
            # PostgreSQL with no transaction open: the change and its events in one round trip.
            change = compare_and_set_statement(self, current, {"status": to, **fields})
            # A waiter is told the settled call's body, built from the row as stored (jsonb
            # and timestamps as a read gives them back), so it need not read the call.
            returning = column_list(type(self)) if to in SETTLED_STATUSES and can_tell() else ""
            events = [self.event(action, actor=actor, data=d) for action, d in audits]
            row = record_if_changed(change, events, returning=returning)
            if row is None:
                return False
            self._changed(to, fields)
            if self.worth_announcing():
                body = self._stored_body(row) if row else None
                announce(self.pk, self.status, body)  # committed: record_if_changed returned
            return True
        # No savepoint: a step inside a caller's transaction commits or rolls back with it.
        with transaction.atomic(savepoint=False):
            if where is None:  # a statement built once per process
                changed = compare_and_set(self, current, {"status": to, **fields})
            else:  # the sweeper's conditions (a lease that may be NULL, or ≤ now) go through the ORM
                changed = bool(type(self).objects.filter(pk=self.pk, **current, **where).update(status=to, **fields))
            if not changed:
                return False
            self._changed(to, fields)
            for action, data in audits:
                self.audit(action, actor=actor, data=data)
        return True

    def _stored_body(self, row: tuple[Any, ...]) -> dict[str, Any]:
        """Return the API body of this call as `row` (all its columns, as just stored) has it."""
        stored = instance_from_row(type(self), row)
        stored.tool = self.tool
        return call_body(stored)

    def _changed(self, to: str, fields: dict[str, Any]) -> None:
        self.status = to
        for name, value in fields.items():
            setattr(self, name, value)

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

    @classmethod
    def claim_as_sent(cls, call_id: str, sent: Sent, lease: timedelta) -> ToolCall | None:
        """`claim` the call an execution message describes, loading it in the same round trip.

        The claim holds only if the call is still as its sender saw it (approved, that
        attempt number, that tool and agent name: the claim's event names them), so
        nothing has to be read first. Returns the claimed call, or None (not as sent:
        claimed already, changed, or renamed; the caller looks, as `claim` does).
        """
        expires = timezone.now() + lease
        attempt = sent.attempts + 1
        changes = {"status": Status.EXECUTING, "attempts": attempt, "lease_expires_at": expires}
        data = {"from": Status.APPROVED, "to": Status.EXECUTING, "attempt": attempt}
        event = new_event(
            "call.execution_started",
            cls.WORKER,
            uuid.UUID(call_id),
            sent.agent,
            sent.tool,
            {**data, "lease_expires_at": expires.isoformat()},
        )
        seen = (Status.APPROVED, sent.attempts, sent.tool, sent.agent)
        model = cast("type[ToolCall]", cls)
        row = record_if_changed(
            claim_statement(model, call_id, seen, changes), [event], returning=with_tool_and_agent_columns(model)
        )
        return None if row is None else call_from_row(model, row)

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
        to, action, data, fields = self._ending(verification)
        return self._execution_step(Status.EXECUTING, to, action=action, actor=self.WORKER, data=data, **fields)

    def record_read(self, result: dict[str, Any], verification: Verification) -> bool:
        """Store a read's answer and end the attempt by it, in one step: `call.executed`, then its ending.

        A read is confirmed by its own answer (no second round trip to the downstream),
        so its result and its ending commit together.
        """
        to, action, data, fields = self._ending(verification)
        events = [("call.executed", Status.EXECUTING, {"result": result}), (action, to, data)]
        return self._step(
            Status.EXECUTING, to, events, actor=self.WORKER, where=None, fields={"result": result, **fields}
        )

    def _ending(self, verification: Verification) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
        """Return (status, action, event data, fields) of ending an attempt by `verification`."""
        confirmed = bool(verification.confirmed)
        error = None
        if not confirmed:
            error = {
                "error": "needs_reconciliation",
                "message": "The effect could not be confirmed downstream; a person must reconcile this call.",
                "detail": verification.detail,
                "observed": verification.observed,
            }
        return (
            Status.SUCCEEDED if confirmed else Status.NEEDS_RECONCILIATION,
            "call.succeeded" if confirmed else "call.needs_reconciliation",
            {"observed": verification.observed, "detail": verification.detail},
            {"error": error, "finished_at": timezone.now(), "lease_expires_at": None},
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
