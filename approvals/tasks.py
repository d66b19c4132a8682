"""Celery tasks: thin interfaces that take ids and call `approvals.execution`.

Delivery is at-least-once (late acks, redelivery when a worker dies), so every
task is safe to run twice: the claim is a compare-and-set on the call's row.
"""

from __future__ import annotations

from celery import shared_task

from approvals import (
    execution,
    telemetry,  # noqa: F401 — its task signals trace executions and name the call in logs
)
from approvals.messages import EXECUTE_CALL, Sent


@shared_task(name=EXECUTE_CALL, ignore_result=True)
def execute_call(*, call_id: str, attempts: int, agent: str, tool: str) -> None:
    """Run one attempt at an approved call; a duplicate or stale delivery does nothing.

    `attempts`, `agent`, `tool`: the call as the sender saw it (`approvals.messages.enqueue`).
    """
    call = execution.claim(call_id, Sent(attempts=attempts, agent=agent, tool=tool))  # approved → executing, or None
    if call is None:
        return
    if not execution.binding_holds(call):
        # The tool changed since approval: it never runs without a fresh approval.
        execution.send_back_for_approval(call)
        return
    attempt = execution.run_attempt(call)  # fresh credential; the executor runs outside any transaction
    execution.record(call, attempt)  # → verify → succeeded / needs_reconciliation, or retry / failed


@shared_task(name="approvals.tasks.sweep", ignore_result=True)
def sweep() -> dict[str, int]:
    """Expire stale approvals, take back vanished attempts, re-send lost ones; return the counts."""
    return execution.sweep()
