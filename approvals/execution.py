"""Everything between "approved" and "the effect happened": one attempt, its verification, the sweeper.

An attempt runs in phases (see `approvals.tasks.execute_call`): claim → check the
approval still binds → call the executor with a fresh credential, outside any
transaction → record → verify. Each state change is a step of `approvals.lifecycle`.
The sweeper re-sends approved calls whose message was lost (`approvals.messages`),
takes back attempts whose worker vanished, and expires calls nobody decided.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from agents.models import Agent, Grant
from approvals import decision_waits, lifecycle, sensitive, tally
from approvals.errors import ApiError
from approvals.messages import Sent, enqueue
from approvals.models import ToolCall
from approvals.states import Status
from audit import counts
from audit.canonical import canonical_hash
from audit.typealiases import JSONObject
from toolcatalog.credentials import Scope, attempt_jti, audience_for, mint
from toolcatalog.executors import ExecutionContext, ExecutorError, OutcomeUnknown, Verification, executor_for
from toolcatalog.models import Tool
from toolcatalog.policies import policy_for
from toolcatalog.policy import evaluate

log = logging.getLogger(__name__)

BACKOFF_BASE_SECONDS = 1.0
BACKOFF_CAP_SECONDS = 60.0
# An approved call nobody claimed for this long has lost its message (broker down at enqueue).
UNCLAIMED_GRACE = timedelta(seconds=5)
SWEEP_BATCH = 500


# ------------------------------------------------------------------ contexts


def downstream_key(call_id: str) -> str:
    """Return the Idempotency-Key the downstream receives: the same for every attempt at one call."""
    return f"gatehouse-call-{call_id}"


def resource_of(tool: Tool, arguments: JSONObject) -> str | None:
    """Return the value of the tool's resource argument (what a credential is scoped to), if any."""
    value = arguments.get(tool.resource_argument) if tool.resource_argument else None
    return None if value is None else str(value)


def approval_ref(call: ToolCall) -> str:
    """Return what the call's permission to run rests on: the approving decisions, or the policy."""
    if call.approvals_required == 0:  # approved by its tier's policy when proposed: no decision to look up
        return f"policy:tier-{call.risk_tier}"
    ids = list(call.approvals().values_list("pk", flat=True))
    return "decisions:" + ",".join(map(str, ids)) if ids else f"policy:tier-{call.risk_tier}"


def context_for(call: ToolCall, scope: str) -> ExecutionContext:
    """Return the context of one attempt, with a freshly minted credential for `scope`."""
    resource = resource_of(call.tool, call.arguments)
    ref = approval_ref(call)
    credential = mint(
        operation=call.tool.name,
        resource=resource,
        call_id=str(call.pk),
        agent=call.agent.name,
        approval_ref=ref,
        audience=audience_for(call.tool),
        scope=scope,
        jti=attempt_jti(str(call.pk), call.attempts, scope),
    )
    return ExecutionContext(
        tool_name=call.tool.name,
        arguments=sensitive.real_arguments(call),  # the executor alone gets the sensitive values
        resource=resource,
        call_id=str(call.pk),
        agent_name=call.agent.name,
        idempotency_key=downstream_key(str(call.pk)),
        credential=credential,
        approval_ref=ref,
    )


def preview_context(tool: Tool, agent: Agent, arguments: JSONObject, call_id: str = "") -> ExecutionContext:
    """Return the context of a dry run: its credential may read the resource, never change it."""
    resource = resource_of(tool, arguments)
    credential = mint(
        operation=tool.name,
        resource=resource,
        call_id=call_id,
        agent=agent.name,
        approval_ref="preview",
        audience=audience_for(tool),
        scope=Scope.PREVIEW,
    )
    return ExecutionContext(
        tool_name=tool.name,
        arguments=arguments,
        resource=resource,
        call_id=call_id,
        agent_name=agent.name,
        idempotency_key="",
        credential=credential,
        approval_ref="preview",
    )


def preview_arguments(tool: Tool, agent: Agent, arguments: JSONObject) -> JSONObject:
    """Predict the effect of calling `tool` with `arguments`: `{summary, before, after}`."""
    try:
        return executor_for(tool).dry_run(preview_context(tool, agent, arguments))
    except ExecutorError as exc:
        return {"summary": "No preview available.", "before": None, "after": None, "error": str(exc)}
    except Exception:  # a preview is advice for the reviewer; its failure must not fail the proposal
        log.exception("dry run of %s failed", tool.name)
        return {"summary": "No preview available.", "before": None, "after": None, "error": "preview failed"}


def attach_preview(call: ToolCall) -> None:
    """Compute the dry-run preview a reviewer reads (outside any transaction); store it if it worked.

    Previews are asked for when a reviewer first opens the call, not at proposal:
    the "before" is then the resource as it is when someone decides, and a call
    nobody looks at before it expires costs the downstream nothing. A failed dry
    run is shown but not stored, so the next look asks again.
    """
    call.preview = preview_arguments(call.tool, call.agent, call.arguments)
    if "error" in call.preview:
        return
    lifecycle.store_preview(call, call.preview)


# ------------------------------------------------------------------ one attempt


@dataclass(frozen=True)
class Attempt:
    """What the executor did: a result, a classified error, or an unexpected crash."""

    result: JSONObject | None = None
    error: ExecutorError | None = None
    crash: str = ""


def claim(call_id: str, sent: Sent | None = None) -> ToolCall | None:
    """Return the call if this delivery won it (approved → executing); None for a duplicate or stale one.

    With what the message said of the call (`sent`), the claim is tried first without
    reading the call; if the call is no longer as sent, it is read and claimed as it
    is, as for a message that says nothing.
    """
    if sent is not None:
        call = lifecycle.claim_as_sent(call_id, sent, settings.CELERY_EXECUTION_LEASE)
        if call is not None:
            return call
    call = ToolCall.objects.select_related("tool", "agent").filter(pk=call_id).first()
    if call is None or call.status != Status.APPROVED:
        return None
    return call if lifecycle.claim(call, settings.CELERY_EXECUTION_LEASE) else None


def binding_holds(call: ToolCall) -> bool:
    """Return whether what runs is exactly what was approved: same arguments, same tool version."""
    return (
        call.arguments_hash == call.approved_arguments_hash == canonical_hash(call.arguments)
        and call.tool.version == call.approved_tool_version
    )


def send_back_for_approval(call: ToolCall) -> None:
    """Re-evaluate a call whose tool changed since approval: pending a fresh approval, or refused."""
    grant = Grant.objects.filter(agent=call.agent, tool=call.tool, tool__enabled=True).first()
    verdict = evaluate(policy_for(call.tool), grant, sensitive.real_arguments(call))
    if verdict.refused:
        lifecycle.refuse_on_recheck(call, ApiError.from_verdict(verdict).body())
    else:
        lifecycle.return_for_approval(
            call, verdict, call.tool.version
        )  # its preview is asked for when a reviewer looks


def run_attempt(call: ToolCall) -> Attempt:
    """Call the executor with a fresh credential; return what happened.

    Runs outside any transaction on purpose: the remote call may take seconds and must
    hold no row lock meanwhile, and what it did downstream cannot be rolled back with
    our transaction anyway — the idempotency key, not a rollback, makes a repeat safe.
    """
    if connection.in_atomic_block:
        raise RuntimeError("executors must not run inside a database transaction")
    try:
        return Attempt(result=executor_for(call.tool).execute(context_for(call, Scope.EXECUTE)))
    except ExecutorError as exc:
        return Attempt(error=exc)
    except Exception as exc:  # a bug or a time limit: the effect is unknown
        log.exception("executor of %s crashed on call %s", call.tool.name, call.pk)
        return Attempt(crash=f"{type(exc).__name__}: {exc}")


def record(call: ToolCall, attempt: Attempt) -> None:
    """Record the attempt's outcome, verify a result, and schedule a retry where one may help."""
    if isinstance(attempt.error, OutcomeUnknown):  # sent, unanswered: never sent again on a guess
        detail = f"The request was sent and no answer came: {attempt.error}"
        lifecycle.finish(call, Verification(confirmed=False, observed=attempt.error.detail, detail=detail))
    elif attempt.error is not None:
        _record_failure(call, attempt.error)
    elif attempt.result is None:
        lifecycle.finish(
            call, Verification(confirmed=False, observed={}, detail=f"The executor crashed: {attempt.crash}")
        )
    elif is_read(call):
        lifecycle.record_read(call, attempt.result, _verify(call, attempt.result))
    elif lifecycle.record_result(call, attempt.result):
        lifecycle.finish(call, _verify(call, attempt.result))
    # else: the lease was taken back meanwhile; the attempt that owns the call now records.


def _verify(call: ToolCall, result: JSONObject) -> Verification:
    """Read the downstream back with a fresh read-only credential (outside any transaction, as above)."""
    if is_read(call):
        # A read has no effect to confirm: its answer is the observation, and a second
        # round trip to ask "did the read happen?" would only add latency.
        return Verification(confirmed=True, observed={}, detail="A read: there is no effect to confirm.")
    try:
        return executor_for(call.tool).verify(context_for(call, Scope.VERIFY), result)
    except ExecutorError as exc:
        return Verification(confirmed=False, observed={}, detail=f"Verification could not run: {exc}")


def is_read(call: ToolCall) -> bool:
    """Return whether the call only reads: a tool declared read-only, classified at the read tier (0)."""
    return call.tool.read_only_hint and call.risk_tier == 0


def backoff(attempt: int) -> float:
    """Return the delay before retrying after failed attempt number `attempt` (1, 2, 4 … capped)."""
    return min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2.0 ** max(attempt - 1, 0))


def _record_failure(call: ToolCall, exc: ExecutorError) -> None:
    error = {
        "error": "execution_failed",
        "message": str(exc),
        "retryable": exc.retryable,
        "attempts": call.attempts,
        "downstream": exc.detail.get("body"),
    }
    if not exc.retryable or call.attempts >= settings.CELERY_EXECUTION_MAX_ATTEMPTS:
        lifecycle.fail_attempt(call, error, retry_at=None)
        return
    delay = backoff(call.attempts)
    if lifecycle.fail_attempt(call, error, retry_at=timezone.now() + timedelta(seconds=delay)):
        enqueue(call, countdown=delay)


# ------------------------------------------------------------------ the sweeper


def sweep(now: datetime | None = None) -> dict[str, int]:
    """Make sure nothing approved is lost and nothing pending waits forever; return counts of what it did."""
    now = now or timezone.now()
    # Leases first: a released attempt is approved again and re-sent by requeue_unclaimed.
    return {
        "expired": expire_pending(now),
        "leases_released": release_expired_leases(now),
        "requeued": requeue_unclaimed(now),
        "tally_rows_folded": tally.fold(),
        "audit_events_counted": counts.fold(),
        "decisions_folded": decision_waits.fold(),
    }


def expire_pending(now: datetime) -> int:
    """Expire pending calls whose approval window has passed; return how many."""
    calls = ToolCall.objects.select_related("agent", "tool").filter(status=Status.PENDING_APPROVAL, expires_at__lte=now)
    return sum(lifecycle.expire(call) for call in calls[:SWEEP_BATCH])


def requeue_unclaimed(now: datetime) -> int:
    """Re-enqueue approved calls whose message never reached a worker; return how many."""
    cutoff = now - UNCLAIMED_GRACE
    never_sent_again = Q(lease_expires_at__isnull=True) & (
        Q(decided_at__lte=cutoff) | Q(decided_at__isnull=True, created_at__lte=cutoff)
    )
    calls = ToolCall.objects.select_related("agent", "tool").filter(
        never_sent_again | Q(lease_expires_at__lte=now), status=Status.APPROVED
    )
    count = 0
    for call in calls[:SWEEP_BATCH]:
        # Send first, mark after: if the broker is still down, the next sweep tries again.
        if enqueue(call):
            # Not again before a lease has passed: a busy worker may simply not have got to it yet.
            lifecycle.requeue(call, not_before=now + settings.CELERY_EXECUTION_LEASE)
            count += 1
    return count


def release_expired_leases(now: datetime) -> int:
    """Take back attempts whose worker vanished; return how many.

    Where the downstream dedupes by idempotency key the call is approved again, due at
    once (requeue_unclaimed sends it); anywhere else it needs a person.
    """
    calls = ToolCall.objects.select_related("agent", "tool").filter(status=Status.EXECUTING, lease_expires_at__lte=now)
    count = 0
    for call in calls[:SWEEP_BATCH]:
        can_repeat = _repeat_safe(call.tool) and call.attempts < settings.CELERY_EXECUTION_MAX_ATTEMPTS
        count += lifecycle.release_expired_lease(call, now=now, can_repeat=can_repeat)
    return count


def _repeat_safe(tool: Tool) -> bool:
    """Return whether the tool's downstream dedupes repeats by idempotency key."""
    try:
        return executor_for(tool).idempotent_delivery
    except ExecutorError:
        return False
