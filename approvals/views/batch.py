"""Deciding several calls of the queue at once: select, confirm, then each call is decided on its own.

Each selected call carries what its queue row showed (arguments hash and tool
version); each is approved or rejected through `lifecycle.approve` / `lifecycle.reject`
bound to that, exactly as the call page's buttons are, so every rule of
`decisions.check_may_decide` applies to each call under its own row lock. A call
that changed since the queue was drawn is left out and named; nothing is decided
for it. htmx gets the confirm step and the results as fragments; a plain browser
gets the confirm page, then the queue with one message per call.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST
from django_htmx.http import trigger_client_event

from approvals import lifecycle
from approvals.decisions import AlreadyApproved, DecisionRefused, Seen
from approvals.models import ToolCall
from approvals.states import Status
from approvals.views.access import get_call_for_reviewer, reviewer_required
from approvals.views.decisions import CHANGED_EVENT, approve_as_seen
from audit.http import ConsoleRequest

APPROVE, REJECT = "approve", "reject"
# More than a page of the queue is never selected at once.
MOST = 50


@dataclass(frozen=True)
class Picked:
    """A selected call and what its row showed."""

    pk: uuid.UUID
    seen: Seen

    @property
    def seen_value(self) -> str:
        """Return the row's binding as the form carries it: "hash:version"."""
        return f"{self.seen.arguments_hash}:{self.seen.tool_version or ''}"


@dataclass(frozen=True)
class Result:
    """What deciding one selected call came to."""

    call: ToolCall | None
    pk: uuid.UUID
    outcome: str  # decided | recorded | left_out | refused
    text: str


def parse_seen(value: str) -> Seen:
    """Return the Seen a row's "hash:version" carried; anything unreadable is treated as not shown."""
    arguments_hash, _, version = value.partition(":")
    return Seen(arguments_hash, int(version) if version.isdigit() else None)


def picked_calls(request: ConsoleRequest) -> list[Picked]:
    """Return the selected calls in the order of the page, each with its row's binding; unreadable ids skipped."""
    picked: list[Picked] = []
    for value in request.POST.getlist("call")[:MOST]:
        try:
            pk = uuid.UUID(value)
        except ValueError:
            continue
        if all(p.pk != pk for p in picked):
            picked.append(Picked(pk, parse_seen(request.POST.get(f"seen-{pk}", ""))))
    return picked


def changed_since(call: ToolCall, seen: Seen) -> str:
    """Return how `call` differs from what its row showed ("" if it does not)."""
    if call.arguments_hash != seen.arguments_hash:
        return "its arguments changed since the queue was drawn"
    if call.tool_version != seen.tool_version:
        return f"its tool “{call.tool.name}” changed (now version {call.tool_version}) since the queue was drawn"
    return ""


def decide_one(request: ConsoleRequest, picked: Picked, action: str, reason: str) -> Result:
    """Approve or reject one selected call bound to its row; return what happened, refusals included."""
    try:
        call = get_call_for_reviewer(request, picked.pk)
    except Http404:
        return Result(None, picked.pk, "refused", "No such call.")
    changed = changed_since(call, picked.seen)
    if changed:
        return Result(call, call.pk, "left_out", f"Left out: {changed}. Open it and read it again.")
    try:
        if action == APPROVE:
            text = approve_as_seen(call, request.user, picked.seen)
            return Result(call, call.pk, "recorded" if call.status == Status.PENDING_APPROVAL else "decided", text)
        lifecycle.reject(call, request.user, reason, seen=picked.seen)
        return Result(call, call.pk, "decided", "Rejected. The agent receives your reason.")
    except AlreadyApproved as waiting:
        return Result(call, call.pk, "recorded", str(waiting))
    except DecisionRefused as refused:
        return Result(call, call.pk, "refused", f"Refused: {refused}")


def _summary(calls: list[ToolCall], picked: list[Picked]) -> list[tuple[Picked, ToolCall | None]]:
    by_pk = {call.pk: call for call in calls}
    return [(p, by_pk.get(p.pk)) for p in picked]


def _confirm(request: ConsoleRequest, picked: list[Picked], action: str, error: str = "") -> HttpResponse:
    """Ask the reviewer to confirm the decision of the selected calls (listing them as they were selected)."""
    calls = list(ToolCall.objects.select_related("agent", "tool").filter(pk__in=[p.pk for p in picked]))
    context = {
        "picked": _summary(calls, picked),
        "action": action,
        "error": error,
        "reason": request.POST.get("reason", ""),
    }
    template = "approvals/_batch_confirm.html" if request.htmx else "approvals/batch_confirm.html"
    return render(request, template, context)


def _results(request: ConsoleRequest, results: list[Result]) -> HttpResponse:
    """Show each call's result: htmx gets the results (and the queue refreshes), a browser the queue's messages."""
    if request.htmx:
        response = render(request, "approvals/_batch_results.html", {"results": results})
        return trigger_client_event(response, CHANGED_EVENT)
    for result in results:
        name = f"{result.call.tool.name} {str(result.pk)[:8]}" if result.call else str(result.pk)[:8]
        level = messages.SUCCESS if result.outcome in ("decided", "recorded") else messages.WARNING
        messages.add_message(request, level, f"{name}: {result.text}")
    return redirect("approvals:queue")


@require_POST
@reviewer_required
def batch(request: ConsoleRequest) -> HttpResponse:
    """Approve or reject the selected calls: first confirm, then decide each bound to what its row showed."""
    picked, action = picked_calls(request), request.POST.get("action", "")
    if action not in (APPROVE, REJECT) or not picked:
        messages.info(request, "Select the calls to decide, then Approve or Reject.")
        return _results(request, [])
    reason = request.POST.get("reason", "").strip()
    if not request.POST.get("confirm"):
        return _confirm(request, picked, action)
    if action == REJECT and not reason:
        return _confirm(request, picked, action, error="Give a reason: each agent receives it.")
    return _results(request, [decide_one(request, p, action, reason) for p in picked])
