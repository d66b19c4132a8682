"""Reviewers' decisions: approve, reject with a reason, edit the arguments.

The rules live in the model methods (compare-and-set under a row lock) and in
`approvals.decisions`; these views only translate requests and refusals. A POST
answers htmx with the refreshed call (and `HX-Trigger: calls-changed` so counters
refresh) and a plain browser with a redirect.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from django.contrib import messages
from django.contrib.auth.models import User
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect, trigger_client_event

from agents.models import Grant
from approvals import lifecycle, sensitive
from approvals.decisions import AlreadyApproved, DecisionRefused, Seen
from approvals.execution import attach_preview, preview_arguments
from approvals.forms import ApprovalForm, ArgumentsForm
from approvals.models import ToolCall
from approvals.standing import Terms
from approvals.states import Status
from approvals.views.access import get_call_for_reviewer, reviewer_required
from approvals.views.calls import call_context, next_call_for, preview_rows
from approvals.views.present import DiffRow, diff_rows
from approvals.views.standing import granted_words, like_this_terms
from audit.canonical import canonical_hash, inexact_numbers, normalized
from audit.http import ConsoleRequest
from audit.typealiases import DjangoValue, JSONObject
from toolcatalog.policies import policy_for
from toolcatalog.policy import Verdict, evaluate
from toolcatalog.sensitive import mask_arguments

CHANGED_EVENT = "calls-changed"


def _answer(request: ConsoleRequest, call: ToolCall) -> HttpResponse:
    """Show the call again: htmx gets the page's body, a browser is redirected to the page."""
    if request.htmx:
        response = render(request, "approvals/_call_detail.html", call_context(call, request.user))
        return trigger_client_event(response, CHANGED_EVENT)
    return redirect("approvals:call", pk=call.pk)


def _enforce_expiry(call: ToolCall) -> None:
    """Expire a call whose window has passed, so the page says so at once rather than at the next sweep."""
    if call.status == Status.PENDING_APPROVAL and call.expires_at and call.expires_at <= timezone.now():
        lifecycle.expire(call)


def approve_as_seen(call: ToolCall, reviewer: User, seen: Seen, like_this: Terms | None = None) -> str:
    """Approve `call` if it is still exactly what the reviewer was shown (and calls like it, if asked); say so."""
    if lifecycle.approve(call, reviewer, seen=seen, like_this=like_this):
        return "Approved. The call runs now." + granted_words(like_this)
    count, needed = call.approval_count(), max(call.approvals_required, 1)
    waiting = f"Your approval is recorded ({count} of {needed}); another reviewer must approve before it runs."
    return waiting + granted_words(like_this)


@require_POST
@reviewer_required
def approve(request: ConsoleRequest, pk: uuid.UUID) -> HttpResponse:
    """Approve the call (binding the arguments and the tool version the reviewer saw).

    With `next`, go on to the oldest call the reviewer may still approve once this one is done.
    """
    call = get_call_for_reviewer(request, pk)
    try:
        like_this = like_this_terms(request.POST)
        messages.success(request, approve_as_seen(call, request.user, ApprovalForm(request.POST).seen(), like_this))
    except AlreadyApproved as waiting:  # nothing was recorded: no success to report
        messages.info(request, str(waiting))
    except DecisionRefused as refused:
        _enforce_expiry(call)
        messages.error(request, str(refused))
        return _answer(request, call)
    if request.POST.get("next"):
        return _open_next(request, call)
    return _answer(request, call)


def _open_next(request: ConsoleRequest, done: ToolCall) -> HttpResponse:
    """Send the reviewer to the oldest call they may still approve, or to the queue if there is none."""
    following = next_call_for(request.user, after=done)
    # ?next=1 keeps "then open the next" ticked, so a reviewer works through the queue call by call.
    url = f"{reverse('approvals:call', args=[following.pk])}?next=1" if following else reverse("approvals:queue")
    if following is None:
        messages.info(request, "No other call is waiting for your approval.")
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


@require_POST
@reviewer_required
def reject(request: ConsoleRequest, pk: uuid.UUID) -> HttpResponse:
    """Reject the call with a reason the agent receives."""
    call = get_call_for_reviewer(request, pk)
    try:
        lifecycle.reject(call, request.user, request.POST.get("reason", ""))
        messages.success(request, "Rejected. The agent receives your reason.")
    except DecisionRefused as refused:
        _enforce_expiry(call)
        messages.error(request, str(refused))
    return _answer(request, call)


@dataclass
class EditReview:
    """An edit judged exactly as the agent's own proposal would be, before anything is saved."""

    arguments: JSONObject  # as stored: sensitive values as their keyed hashes
    verdict: Verdict
    diff: list[DiffRow]
    preview: JSONObject | None = None
    problems: list[str] = field(default_factory=list)
    sensitive_values: JSONObject | None = None

    @property
    def acceptable(self) -> bool:
        return not self.problems

    @property
    def preview_rows(self) -> list[DiffRow]:
        return preview_rows(self.preview or {})


def review_edit(call: ToolCall, form: ArgumentsForm, base_hash: str) -> EditReview:
    """Re-validate and re-classify edited arguments under the agent's grant; say what stops them."""
    typed = form.arguments()
    # The same canonical form a proposal gets at intake: the one hashed, stored and run; a sensitive
    # value left masked keeps the current one, and is judged (never shown) as the real value.
    real = sensitive.edited(call, normalized(typed))
    arguments, values = sensitive.split(call.tool, real)
    grant = Grant.objects.filter(agent_id=call.agent_id, tool_id=call.tool_id).first()
    verdict = evaluate(policy_for(call.tool), grant, real)
    shown = mask_arguments(call.tool, call.arguments), mask_arguments(call.tool, arguments, before=call.arguments)
    review = EditReview(arguments, verdict, diff_rows(*shown), sensitive_values=values)
    if base_hash != call.arguments_hash:
        review.problems.append("The arguments changed while you were editing; start again from the current ones.")
    if inexact := inexact_numbers(typed):
        review.problems.append(f"More precise than a JSON number can hold exactly: {', '.join(inexact)}.")
    if canonical_hash(arguments) == call.arguments_hash:
        review.problems.append("Nothing changed.")
    if verdict.error_code == "invalid_arguments":
        form.add_schema_errors(verdict.errors)
        review.problems.append("The edited arguments do not match the tool's schema.")
    elif verdict.refused:
        review.problems.append(verdict.message)
    if review.acceptable:
        review.preview = preview_arguments(call.tool, call.agent, arguments)
    return review


def _save_edit(request: ConsoleRequest, call: ToolCall, review: EditReview) -> HttpResponse | None:
    """Save a confirmed edit and go back to the call; None (with a message) if refused."""
    before = call.risk_tier
    try:
        lifecycle.edit_arguments(call, request.user, review.arguments, review.verdict, review.sensitive_values)
    except DecisionRefused as refused:
        _enforce_expiry(call)
        messages.error(request, str(refused))
        return None
    attach_preview(call)  # outside the edit's transaction: a dry run may call the downstream service
    messages.success(
        request,
        f"Arguments edited (tier {before} → {call.risk_tier}). You proposed them, so another reviewer approves them.",
    )
    return redirect("approvals:call", pk=call.pk)


@require_http_methods(["GET", "POST"])
@reviewer_required
def edit(request: ConsoleRequest, pk: uuid.UUID) -> HttpResponse:
    """Edit a pending call's arguments: fill in, review the diff and new tier, then confirm."""
    call = get_call_for_reviewer(request, pk)
    if call.status != Status.PENDING_APPROVAL:
        messages.error(request, f"This call is {call.get_status_display().lower()}; its arguments can't change.")
        return redirect("approvals:call", pk=call.pk)
    form = ArgumentsForm(call.tool.input_schema, mask_arguments(call.tool, call.arguments), request.POST or None)
    context: dict[str, DjangoValue] = {"call": call, "form": form, "base_hash": call.arguments_hash}
    if request.method == "POST" and form.is_valid():
        context["base_hash"] = request.POST.get("base_hash", "")
        review = context["review"] = review_edit(call, form, context["base_hash"])
        if review.acceptable and request.POST.get("confirm"):
            saved = _save_edit(request, call, review)
            if saved is not None:
                return saved
    return render(request, "approvals/call_edit.html", context)
