"""A reviewer for the embedded-default tests: decides every held call until SIGTERM.

Run as `python -m tests.embedded_reviewer` with the stack's environment. Every fifth
held call is rejected; the others are approved by as many of alice and bob as their
tier requires, through the same model methods the console's buttons call. Prints one
line per decision, and its counts when it stops.
"""

from __future__ import annotations

import signal
import time
from types import FrameType

import django

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402 — after django.setup()

from approvals import lifecycle  # noqa: E402
from approvals.decisions import DecisionRefused  # noqa: E402
from approvals.models import ToolCall  # noqa: E402
from approvals.states import Status  # noqa: E402

stopping = False


def stop(signum: int, frame: FrameType | None) -> None:
    global stopping
    stopping = True


def decide(call: ToolCall, number: int, reviewers: list) -> str:
    """Reject every fifth call, approve the rest; return what was done."""
    if number % 5 == 0:
        lifecycle.reject(call, reviewers[0], reason="Rejected by the embedded-default test's reviewer.")
        return "rejected"
    for reviewer in reviewers[: max(call.approvals_required, 1)]:
        lifecycle.approve(call, reviewer)
    return "approved"


def main() -> None:
    signal.signal(signal.SIGTERM, stop)
    users = get_user_model().objects
    reviewers = [users.get(username="alice"), users.get(username="bob")]
    counts = {"approved": 0, "rejected": 0, "refused": 0}
    number = 0
    while not stopping:
        for call in ToolCall.objects.filter(status=Status.PENDING_APPROVAL).order_by("created_at"):
            number += 1
            try:
                outcome = decide(call, number, reviewers)
            except DecisionRefused:  # e.g. its approval window closed meanwhile
                outcome = "refused"
            counts[outcome] += 1
            print(f"{outcome} {call.pk}", flush=True)
        time.sleep(0.5)
    print(f"reviewer stopped: {counts}", flush=True)


if __name__ == "__main__":
    main()
