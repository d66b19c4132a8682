"""Everything that happens to a ToolCall, on one compare-and-set that writes its audit events with it.

`change()` is the only way a call's status moves: `UPDATE … WHERE pk AND status IN
expected` (and, for a worker's step, the attempt number), then the events, in the
transaction its caller opened; whoever changed no row lost, and writes nothing. Effects outside the
database (the execution message, telling waiters) happen after commit.

The life of a call: `propose` (approved or pending_approval) or `refuse_proposal`;
a reviewer's `approve`, `reject`, `edit_arguments`; the clock's `expire`; a policy
change's `rejudge` / `refuse_on_policy_change`; a deactivation's `withdraw` (or the
agent's own, `withdraw_by_agent`); then a worker's attempt: `claim` → `record_result`
→ `finish` (or `record_read`, or `fail_attempt`), `return_for_approval` /
`refuse_on_recheck` when the tool changed since approval, and the sweeper's `requeue` /
`release_expired_lease`. Beside the life, `store_preview` keeps the dry run a reviewer reads.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from functools import partial

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from agents.breakers import record_failure
from agents.budgets import Budget
from agents.models import Agent
from approvals import sensitive, standing, store
from approvals.decisions import DecisionRefused, Seen, check_may_decide
from approvals.messages import Sent, enqueue_on_commit
from approvals.models import Decision, ToolCall
from approvals.notices import announce
from approvals.states import (
    AGENT_DEACTIVATED,
    SETTLED_STATUSES,
    SYSTEM,
    TERMINAL_STATUSES,
    WITHDRAWABLE_STATUSES,
    DecisionKind,
    Status,
)
from audit.canonical import canonical_hash
from audit.chain import new_event, record
from audit.models import ActorKind
from audit.typealiases import JSONObject
from toolcatalog.executors import Verification
from toolcatalog.models import Tool
from toolcatalog.policy import Verdict
from toolcatalog.sensitive import scrub

WORKER = (ActorKind.SYSTEM, "worker")
SWEEPER = (ActorKind.SYSTEM, "sweeper")
Events = list[tuple[str, JSONObject]]
# Conditions a compare-and-set adds on the row (`QuerySet.filter` keywords: values, querysets, datetimes).
Where = Mapping[str, object]
# The error code of a call its agent withdrew (refused, like a deactivated agent's: not a status of its own).
WITHDRAWN_BY_AGENT = "withdrawn_by_agent"


# ------------------------------------------------------------------ the one compare-and-set


def change(
    call: ToolCall,
    expected: tuple[str, ...],
    to: str,
    events: Events,
    *,
    actor: tuple[str, str],
    where: Where | None = None,
    **fields: object,
) -> bool:
    """Move `call` to `to` if, and only if, its row is still in `expected` (and matches `where`); return whether.

    Runs inside the caller's transaction, so the change, its events and whatever the
    caller checked under its lock commit together (a reviewer's approval is one
    transaction, its row locked once).
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("lifecycle.change() must run inside the transaction that commits it")
    rows = ToolCall.objects.filter(pk=call.pk, status__in=expected, **(where or {}))
    if not rows.update(status=to, **fields):
        return False
    call.status = to
    for name, value in fields.items():
        setattr(call, name, value)
    for action, data in events:
        audit(call, action, actor=actor, data=data)
    if to in TERMINAL_STATUSES:  # settled: nothing will run it again, so its sensitive values go
        sensitive.erase(call)
    return True


def audit(call: ToolCall, action: str, *, actor: tuple[str, str], data: JSONObject | None = None) -> None:
    """Write an audit event about `call` (inside the caller's transaction); tell waiters on commit if it settled."""
    record(action, actor=actor, call_id=call.pk, agent_name=call.agent.name, tool_name=call.tool.name, data=data)
    # Nobody waits on a call before it exists, and approved or executing end no wait.
    if action != "call.proposed" and call.status in SETTLED_STATUSES:
        transaction.on_commit(partial(announce, call.pk, call.status))


def _move(
    call: ToolCall,
    expected: str | tuple[str, ...],
    to: str,
    *,
    actor: tuple[str, str],
    action: str,
    data: JSONObject | None = None,
    where: Where | None = None,
    **fields: object,
) -> bool:
    """`change` by a person or the system, told as one event {from, to, …data}."""
    allowed = (expected,) if isinstance(expected, str) else expected
    event = {"from": list(allowed), "to": to, **(data or {})}
    return change(call, allowed, to, [(action, event)], actor=actor, where=where, **fields)


def _step(
    call: ToolCall,
    expected: str,
    to: str,
    events: Sequence[tuple[str, str, JSONObject]],
    *,
    actor: tuple[str, str] = WORKER,
    where: Where | None = None,
    **fields: object,
) -> bool:
    """`change` of one attempt, told as events (action, the status each tells of, data).

    It holds only for this attempt number, so a worker whose lease the sweeper took
    back can no longer write anything.
    """
    attempt = fields.get("attempts", call.attempts)
    # A downstream may echo what it received: its answers are stored and audited without the call's secrets.
    hidden = sensitive.scrubber(call)
    events = [(action, tells, scrub(data, hidden)) for action, tells, data in events]
    fields = {name: scrub(value, hidden) for name, value in fields.items()}
    told = [(action, {"from": expected, "to": tells, "attempt": attempt, **data}) for action, tells, data in events]
    scope = {"attempts": call.attempts, **(where or {})}
    with transaction.atomic():
        return change(call, (expected,), to, told, actor=actor, where=scope, **fields)


# ------------------------------------------------------------------ proposing


def propose(call: ToolCall, budgets: list[Budget], now: datetime) -> None:
    """Store a new accepted call (approved or pending) with its `call.proposed` event, spending `budgets`.

    A taken idempotency key raises IntegrityError and BudgetExhausted an exhausted
    budget; either way nothing is stored or spent. An approved call is sent to a
    worker once this commits.
    """
    event = new_event(
        "call.proposed",
        actor=(ActorKind.AGENT, call.agent.name),
        call_id=call.pk,
        agent_name=call.agent.name,
        tool_name=call.tool.name,
        data=proposed_data(call),
    )
    values = getattr(call, "sensitive_values", {})
    # Sensitive values are kept encrypted in the same transaction: with the call, or not at all.
    store.commit_proposed(call, budgets, now, event, also=partial(sensitive.keep, call, values) if values else None)
    if call.status == Status.APPROVED:
        enqueue_on_commit(call)  # at once, or when a caller's transaction commits


def refuse_proposal(call: ToolCall, kind: str) -> None:
    """Store and audit a refused proposal (`call.status` refused, its error set); count it for the breaker."""
    agent, tool = call.agent, call.tool
    with transaction.atomic():
        call.save(force_insert=True)
        audit(
            call, "call.refused", actor=(ActorKind.AGENT, agent.name), data={**proposed_data(call), "error": call.error}
        )
        record_failure(agent_id=agent.pk, tool_id=tool.pk, kind=kind, agent_name=agent.name, tool_name=tool.name)


def record_replay(call: ToolCall) -> None:
    """Audit a duplicate absorbed by idempotency: the console's overview counts these events."""
    with transaction.atomic():
        data = {"idempotency_key": call.idempotency_key, "status": call.status}
        audit(call, "call.replayed", actor=(ActorKind.AGENT, call.agent.name), data=data)


def proposed_data(call: ToolCall) -> JSONObject:
    names = ("status", "risk_tier", "risk_reasons", "tool_version", "arguments", "arguments_hash")
    more = ("idempotency_key", "conversation_id", "step", "call_index", "justification")
    data: JSONObject = {name: getattr(call, name) for name in (*names, *more)}
    if call.on_behalf_of is not None:  # an OAuth client's agent, acting for this person
        data["on_behalf_of"] = call.on_behalf_of.get_username()
    return data


# ------------------------------------------------------------------ reviewers and the clock


def store_preview(call: ToolCall, preview: JSONObject) -> None:
    """Keep the dry-run preview a reviewer reads (no status change, so no event).

    Only for the arguments it was computed from: a reviewer's edit brings its own preview.
    """
    ToolCall.objects.filter(pk=call.pk, arguments_hash=call.arguments_hash).update(preview=preview)


def locked(call: ToolCall) -> ToolCall:
    """Return `call` re-read under a row lock (decisions on one call are serialised).

    Only the call's row: locking its agent too would make a deactivation (which holds
    the agent's row, then locks its calls to withdraw them) and an approval deadlock.
    """
    return ToolCall.objects.select_for_update(of=("self",)).select_related("agent", "tool").get(pk=call.pk)


def _decision(
    call: ToolCall, reviewer: User, kind: str, reason: str = "", *, arguments_hash: str | None = None
) -> Decision:
    """Record a reviewer's act, bound to the call's arguments (an edit: to the arguments it proposed)."""
    return Decision.objects.create(
        call=call,
        reviewer=reviewer,
        reviewer_name=reviewer.get_username(),
        kind=kind,
        reason=reason,
        arguments_hash=arguments_hash or call.arguments_hash,
        tool_version=call.tool_version,
    )


def approve(
    call: ToolCall, reviewer: User, *, seen: Seen | None = None, like_this: standing.Terms | None = None
) -> bool:
    """Record `reviewer`'s approval; return True if the call is now approved to run.

    `seen`: what the reviewer's page showed; the approval is refused unless the call
    still has those arguments under that tool version. The approval binds both, and
    execution checks both. A reviewer whose approval already counts is told so
    (AlreadyApproved) and nothing is recorded. `like_this`: also approve calls like
    this one on these terms (a standing approval, given in the same transaction: a
    refused one refuses the approval too).
    """
    actor = (ActorKind.REVIEWER, reviewer.get_username())
    with transaction.atomic():
        held = locked(call)  # held until commit: no edit or re-judging slips in after these checks
        check_may_decide(held, reviewer, approving=True)
        if seen is not None:
            seen.check(held)
        if like_this is not None:
            standing.grant(held, reviewer, like_this, sensitive.real_arguments(held))
        _decision(held, reviewer, DecisionKind.APPROVE)
        count = held.approval_count()
        binds = {"arguments_hash": held.arguments_hash, "tool_version": held.tool_version}
        data = {"approvals": count, "required": held.approvals_required, **binds}
        audit(held, "call.approval_recorded", actor=actor, data=data)
        won = count >= max(held.approvals_required, 1) and _move(
            held,
            Status.PENDING_APPROVAL,
            Status.APPROVED,
            actor=actor,
            action="call.approved",
            data={"approvals": count, **binds},
            decided_at=timezone.now(),
            approved_arguments_hash=held.arguments_hash,
            approved_tool_version=held.tool_version,
        )
        if won:
            enqueue_on_commit(held)
    call.refresh_from_db()
    return won


def reject(call: ToolCall, reviewer: User, reason: str, *, seen: Seen | None = None) -> bool:
    """Reject the call with a reason the agent will receive; return whether this caller decided it.

    `seen`, if given (a batch decision), refuses unless the call is still what the reviewer was shown.
    """
    reason = reason.strip()
    if not reason:
        raise DecisionRefused("Give a reason: the agent receives it.")
    with transaction.atomic():
        held = locked(call)
        check_may_decide(held, reviewer, approving=False)
        if seen is not None:
            seen.check(held)
        _decision(held, reviewer, DecisionKind.REJECT, reason)
        now = timezone.now()
        won = _move(
            held,
            Status.PENDING_APPROVAL,
            Status.REJECTED,
            actor=(ActorKind.REVIEWER, reviewer.get_username()),
            action="call.rejected",
            data={"reason": reason},
            error={"error": "rejected", "message": f"A reviewer rejected this call: {reason}", "reason": reason},
            decided_at=now,
            finished_at=now,
        )
    call.refresh_from_db()
    return won


def edit_arguments(
    call: ToolCall,
    reviewer: User,
    arguments: JSONObject,
    verdict: Verdict,
    sensitive_values: JSONObject | None = None,
) -> None:
    """Replace the arguments with a reviewer's edit, already re-validated and re-classified as `verdict`.

    Earlier approvals were of other arguments, so they no longer count; the call
    stays pending until the edited arguments are approved. `arguments` are as stored
    (redacted); `sensitive_values`, if given, replace the kept ones (approvals.sensitive).
    """
    with transaction.atomic():
        held = locked(call)
        check_may_decide(held, reviewer, approving=False)
        before, edited_hash = held.arguments, canonical_hash(arguments)
        # The editor proposed these arguments: the decision binds them, so their approval of them won't count.
        _decision(held, reviewer, DecisionKind.EDIT, arguments_hash=edited_hash)
        data = {"before": before, "after": arguments, "risk_tier_before": held.risk_tier}
        changed = _move(
            held,
            Status.PENDING_APPROVAL,
            Status.PENDING_APPROVAL,
            actor=(ActorKind.REVIEWER, reviewer.get_username()),
            action="call.arguments_edited",
            data={**data, "risk_tier_after": verdict.risk_tier},
            arguments=arguments,
            arguments_hash=edited_hash,
            original_arguments=held.original_arguments or before,
            risk_tier=verdict.risk_tier,
            risk_reasons=verdict.risk_reasons,
            # A person changed what will run, so a person approves the result.
            approvals_required=max(verdict.approvals_required, 1),
        )
        if not changed:
            raise DecisionRefused("This call is no longer waiting for a decision.")
        if sensitive_values is not None:
            sensitive.keep(held, sensitive_values)
    call.refresh_from_db()


def expire(call: ToolCall) -> bool:
    """Expire a pending call whose approval window has passed; return whether this caller did."""
    now = timezone.now()
    message = "No reviewer approved this call within its approval window."
    with transaction.atomic():
        return _move(
            call,
            Status.PENDING_APPROVAL,
            Status.EXPIRED,
            actor=SYSTEM,
            action="call.expired",
            data={"expires_at": call.expires_at.isoformat() if call.expires_at else None},
            where={"expires_at__lte": now},
            error={"error": "expired", "message": message},
            finished_at=now,
        )


def withdraw_calls_of(agent_id: int) -> int:
    """Withdraw a deactivated agent's calls that wait for a reviewer or a worker; return how many.

    The rows are locked, so a concurrent approval or a worker's claim waits for this
    and then finds the call withdrawn; a call a worker already claimed (executing)
    runs to its end, and a finished one is left as it is.
    """
    with transaction.atomic():
        calls = ToolCall.objects.select_for_update(of=("self",)).select_related("agent", "tool")
        return sum(withdraw(call) for call in calls.filter(agent_id=agent_id, status__in=WITHDRAWABLE_STATUSES))


def withdraw(call: ToolCall) -> bool:
    """Refuse this pending or approved call because its agent was deactivated; return whether this caller did.

    Inside `withdraw_calls_of`'s transaction, which holds the call's row.
    """
    error = {
        "error": AGENT_DEACTIVATED,
        "message": "The agent that proposed this call was deactivated, so the call was withdrawn: it will not run.",
    }
    return _move(
        call,
        WITHDRAWABLE_STATUSES,
        Status.REFUSED,
        actor=SYSTEM,
        action="call.withdrawn",
        data={"reason": AGENT_DEACTIVATED, "was": call.status, "error": error},
        error=error,
        finished_at=timezone.now(),
    )


def withdraw_by_agent(call: ToolCall) -> bool:
    """Withdraw a call its own agent no longer wants, if nothing has started it; return whether this caller did.

    As a deactivation's withdrawal: a pending or approved call is refused and never
    runs; a call a worker already claimed (executing) runs to its end, and a finished
    one is left as it is. The row lock orders this after a decision in progress.
    """
    error = {"error": WITHDRAWN_BY_AGENT, "message": "The agent withdrew this call before it ran: it will not run."}
    with transaction.atomic():
        held = locked(call)
        return _move(
            held,
            WITHDRAWABLE_STATUSES,
            Status.REFUSED,
            actor=(ActorKind.AGENT, held.agent.name),
            action="call.withdrawn",
            data={"reason": WITHDRAWN_BY_AGENT, "was": held.status, "error": error},
            error=error,
            finished_at=timezone.now(),
        )


# ------------------------------------------------------------------ a policy change


def judged(call: ToolCall) -> JSONObject:
    """Return what the policy decided about a pending call."""
    names = ("tool_version", "risk_tier", "risk_reasons", "approvals_required")
    return {name: getattr(call, name) for name in names}


def rejudge(call: ToolCall, verdict: Verdict, version: int) -> bool:
    """Take the current policy's `verdict` on a pending call (tool `version`); return whether anything changed.

    Inside the caller's transaction, which holds the call's row (`approvals.receivers.reevaluate_call`).
    """
    before = judged(call)
    after: JSONObject = {
        "tool_version": version,
        "risk_tier": verdict.risk_tier,
        "risk_reasons": verdict.risk_reasons,
        # It was held for a person: a loosened policy does not release it unseen.
        "approvals_required": max(verdict.approvals_required, 1),
    }
    if after == before:
        return False
    data = {"reason": "policy_changed", "before": before, "after": after}
    return _move(
        call,
        Status.PENDING_APPROVAL,
        Status.PENDING_APPROVAL,
        actor=SYSTEM,
        action="call.reevaluated",
        data=data,
        **after,
    )


def refuse_on_policy_change(call: ToolCall, verdict: Verdict, version: int, error: JSONObject) -> bool:
    """The current policy refuses a pending call: pending_approval → refused; return whether this caller did.

    Inside the caller's transaction, which holds the call's row, as for `rejudge`.
    """
    return _move(
        call,
        Status.PENDING_APPROVAL,
        Status.REFUSED,
        actor=SYSTEM,
        action="call.refused_on_policy_change",
        data={"before": judged(call), "tool_version": version, "error": error},
        error=error,
        tool_version=version,
        risk_tier=verdict.risk_tier if verdict.risk_tier is not None else call.risk_tier,
        risk_reasons=verdict.risk_reasons,
        finished_at=timezone.now(),
    )


# ------------------------------------------------------------------ one attempt
# claim (approved → executing, attempts + 1, a lease) → the executor, outside any
# transaction → record_result → finish (succeeded or needs_reconciliation), or
# fail_attempt (back to approved for a retry, or failed). On an *approved* call,
# lease_expires_at means "not before": the sweeper leaves the call alone until then
# (a retry's backoff, or a message it has just re-sent).


def claim(call: ToolCall, lease: timedelta) -> bool:
    """Start an attempt (approved → executing, holding a lease); return False if another delivery won."""
    return _claim(call, lease, where=None)


def claim_as_sent(call_id: str, sent: Sent, lease: timedelta) -> ToolCall | None:
    """`claim` the call an execution message describes, without reading it first; return it claimed, or None.

    The claim holds only if the call is still as its sender saw it (approved, that
    attempt number, that tool and agent name: the claim's event names them). None:
    claimed already, changed, or renamed (the caller reads it and claims it as it is).
    """
    agent, tool = Agent(name=sent.agent), Tool(name=sent.tool)
    as_sent = ToolCall(pk=uuid.UUID(call_id), status=Status.APPROVED, attempts=sent.attempts, agent=agent, tool=tool)
    # Subqueries, not joins: the status and attempt number stay conditions on the call's own row,
    # which PostgreSQL checks again on the row a concurrent claim left.
    names = {"agent__in": Agent.objects.filter(name=sent.agent), "tool__in": Tool.objects.filter(name=sent.tool)}
    if not _claim(as_sent, lease, where=names):
        return None
    return ToolCall.objects.select_related("tool", "agent").get(pk=as_sent.pk)


def _claim(call: ToolCall, lease: timedelta, where: Where | None) -> bool:
    expires = timezone.now() + lease
    events = [("call.execution_started", Status.EXECUTING, {"lease_expires_at": expires.isoformat()})]
    attempts = call.attempts + 1
    return _step(
        call, Status.APPROVED, Status.EXECUTING, events, where=where, attempts=attempts, lease_expires_at=expires
    )


def return_for_approval(call: ToolCall, verdict: Verdict, tool_version: int) -> bool:
    """The tool changed after approval: back to pending_approval under its current policy.

    Returns whether this caller did it. Approvals bind the old tool version, so
    they no longer count: the call waits for a fresh approval (at least one).
    """
    data = {
        "approved_tool_version": call.approved_tool_version,
        "tool_version": tool_version,
        "risk_tier_before": call.risk_tier,
        "risk_tier_after": verdict.risk_tier,
        "risk_reasons": verdict.risk_reasons,
    }
    window = verdict.approval_window
    assert window is not None, "a verdict that is not a refusal carries its tier's approval window"
    return _step(
        call,
        Status.EXECUTING,
        Status.PENDING_APPROVAL,
        [("call.returned_for_approval", Status.PENDING_APPROVAL, data)],
        tool_version=tool_version,
        risk_tier=verdict.risk_tier,
        risk_reasons=verdict.risk_reasons,
        approvals_required=max(verdict.approvals_required, 1),
        decided_at=None,
        expires_at=timezone.now() + window,
        approved_arguments_hash="",
        approved_tool_version=None,
        lease_expires_at=None,
        preview=None,
    )


def refuse_on_recheck(call: ToolCall, error: JSONObject) -> bool:
    """The current policy refuses what was approved under an older one: executing → refused."""
    events = [("call.refused_on_recheck", Status.REFUSED, {"error": error})]
    now = timezone.now()
    return _step(call, Status.EXECUTING, Status.REFUSED, events, error=error, finished_at=now, lease_expires_at=None)


def record_result(call: ToolCall, result: JSONObject) -> bool:
    """Store what the downstream answered (still executing: verification comes next); return whether stored."""
    events = [("call.executed", Status.EXECUTING, {"result": result})]
    return _step(call, Status.EXECUTING, Status.EXECUTING, events, result=result)


def finish(call: ToolCall, verification: Verification) -> bool:
    """End the attempt by what reading the downstream back showed: succeeded or needs_reconciliation."""
    to, action, data, error = _ending(verification)
    now = timezone.now()
    return _step(call, Status.EXECUTING, to, [(action, to, data)], error=error, finished_at=now, lease_expires_at=None)


def record_read(call: ToolCall, result: JSONObject, verification: Verification) -> bool:
    """Store a read's answer and end the attempt by it, in one step: `call.executed`, then its ending.

    A read is confirmed by its own answer (no second round trip to the downstream),
    so its result and its ending commit together.
    """
    to, action, data, error = _ending(verification)
    events = [("call.executed", Status.EXECUTING, {"result": result}), (action, to, data)]
    now = timezone.now()
    return _step(call, Status.EXECUTING, to, events, result=result, error=error, finished_at=now, lease_expires_at=None)


def _ending(verification: Verification) -> tuple[str, str, JSONObject, JSONObject | None]:
    """Return (status, action, event data, the call's error) of ending an attempt by `verification`."""
    observed: JSONObject = {"observed": verification.observed, "detail": verification.detail}
    if verification.confirmed:
        return Status.SUCCEEDED, "call.succeeded", observed, None
    message = "The effect could not be confirmed downstream; a person must reconcile this call."
    error = {"error": "needs_reconciliation", "message": message, **observed}
    return Status.NEEDS_RECONCILIATION, "call.needs_reconciliation", observed, error


def fail_attempt(call: ToolCall, error: JSONObject, retry_at: datetime | None) -> bool:
    """End a failed attempt: back to approved until `retry_at`, or failed when None; return whether done."""
    if retry_at is not None:
        events = [("call.retry_scheduled", Status.APPROVED, {"error": error, "retry_at": retry_at.isoformat()})]
        return _step(call, Status.EXECUTING, Status.APPROVED, events, error=error, lease_expires_at=retry_at)
    events = [("call.failed", Status.FAILED, {"error": error})]
    now = timezone.now()
    return _step(call, Status.EXECUTING, Status.FAILED, events, error=error, finished_at=now, lease_expires_at=None)


def requeue(call: ToolCall, not_before: datetime) -> bool:
    """Mark an approved call nobody claimed as re-sent (the caller enqueues it); return whether this sweeper won."""
    events: list[tuple[str, str, JSONObject]] = [("call.requeued", Status.APPROVED, {})]
    where = {"lease_expires_at": call.lease_expires_at}
    return _step(
        call, Status.APPROVED, Status.APPROVED, events, actor=SWEEPER, where=where, lease_expires_at=not_before
    )


def release_expired_lease(call: ToolCall, *, now: datetime, can_repeat: bool) -> bool:
    """Take back an attempt whose lease ran out by `now` (its worker vanished); return whether this sweeper did.

    `can_repeat`: the downstream gets the same idempotency key again, so running the
    attempt again cannot duplicate its effect → approved, due at once (the sweeper
    re-sends it). Otherwise the effect is unknown → needs_reconciliation, for a person.
    """
    where = {"lease_expires_at__lte": now}
    data = {"lease_expires_at": call.lease_expires_at.isoformat() if call.lease_expires_at else None}
    if can_repeat:
        events = [("call.lease_expired", Status.APPROVED, {**data, "next": "run again with the same idempotency key"})]
        return _step(call, Status.EXECUTING, Status.APPROVED, events, actor=SWEEPER, where=where, lease_expires_at=now)
    error = {
        "error": "needs_reconciliation",
        "message": "The worker stopped during an attempt that may not run again (its downstream does not "
        "dedupe by idempotency key, or its attempts are spent); a person must check the downstream.",
    }
    events = [("call.lease_expired", Status.NEEDS_RECONCILIATION, {**data, "next": "needs_reconciliation"})]
    return _step(
        call,
        Status.EXECUTING,
        Status.NEEDS_RECONCILIATION,
        events,
        actor=SWEEPER,
        where=where,
        error=error,
        finished_at=now,
        lease_expires_at=None,
    )
