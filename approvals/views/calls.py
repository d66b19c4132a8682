"""A call's page: what the agent asked for, what it would change, why it is at its tier, what happened.

The page's live part (status, approvals, result, timeline) polls while anything
can still change, so the result appears without a reload.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET
from django_htmx.http import HttpResponseClientRefresh

from approvals.duties import DecisionRefused, check_may_decide
from approvals.execution import attach_preview
from approvals.models import DecisionKind, Status, ToolCall
from approvals.views.access import _get_call_for_reviewer, reviewer_required
from approvals.views.present import argument_rows, diff_rows, seconds_until
from audit.models import Event
from toolcatalog.models import RiskTier

TIMELINE_LIMIT = 200
# How often the live part refreshes: fast while a worker runs it, slower while it waits for people.
POLL_IN_FLIGHT = "1s"
POLL_PENDING = "4s"


def approvers(call: ToolCall) -> list[str]:
    """Return who approved the call's current arguments under its current tool version."""
    names = call.decisions.filter(
        kind=DecisionKind.APPROVE, arguments_hash=call.arguments_hash, tool_version=call.tool_version
    ).values_list("reviewer_name", flat=True)
    return sorted(set(names))


def previous_proposal(call: ToolCall) -> ToolCall | None:
    """Return the agent's last earlier proposal of the same tool in the same conversation."""
    if not call.conversation_id:
        return None
    return (
        ToolCall.objects.filter(
            agent_id=call.agent_id,
            conversation_id=call.conversation_id,
            tool_id=call.tool_id,
            created_at__lt=call.created_at,
        )
        .exclude(pk=call.pk)
        .only("id", "arguments", "status", "created_at", "step", "call_index", "error")
        .order_by("-created_at")
        .first()
    )


def refusal_for(call: ToolCall, user: AbstractBaseUser) -> str:
    """Return why `user` could not approve this call now ("" if they could), before they try."""
    if call.status != Status.PENDING_APPROVAL:
        return ""
    try:
        check_may_decide(call, user, approving=True)
    except DecisionRefused as refused:
        return str(refused)
    return ""


def poll_interval(call: ToolCall) -> str:
    """Return how often the live part polls, or "" once nothing can change any more."""
    if call.status in (Status.APPROVED, Status.EXECUTING):
        return POLL_IN_FLIGHT
    return POLL_PENDING if call.status == Status.PENDING_APPROVAL else ""


def result_rows(result: Any) -> list[Any]:
    """Return a result's fields for display: its own fields first, nested ones (order.…) after."""
    if not isinstance(result, dict):
        return []
    return sorted(diff_rows(None, result), key=lambda row: "." in row.name)


def live_context(call: ToolCall, user: AbstractBaseUser) -> dict[str, Any]:
    """Return what the live part of the page shows: state, approvals, result, timeline."""
    now = timezone.now()
    return {
        "call": call,
        "tier": RiskTier.objects.select_related("approver_group").filter(level=call.risk_tier).first(),
        "approvers": approvers(call),
        "approvals_needed": max(call.approvals_required, 1),
        "seconds_left": seconds_until(call.expires_at, now),
        "refusal": refusal_for(call, user),
        "poll_interval": poll_interval(call),
        "result_rows": result_rows(call.result),
        "timeline": list(Event.objects.filter(call_id=call.pk).order_by("seq")[:TIMELINE_LIMIT]),
    }


def preview_rows(preview: dict[str, Any]) -> list[Any]:
    """Return the dry run as before → after rows; a run that would fail shows only the state before."""
    before, after = preview.get("before"), preview.get("after")
    return diff_rows(before, before if after is None else after)


def call_context(call: ToolCall, user: AbstractBaseUser) -> dict[str, Any]:
    """Return everything the call page shows."""
    preview = call.preview or {}
    previous = previous_proposal(call)
    return {
        **live_context(call, user),
        "arguments": argument_rows(call.arguments, call.tool.input_schema),
        "edit_diff": diff_rows(call.original_arguments, call.arguments) if call.original_arguments else [],
        "preview": preview,
        "preview_rows": preview_rows(preview),
        "previous": previous,
        "previous_diff": diff_rows(previous.arguments, call.arguments) if previous else [],
    }


@require_GET
@reviewer_required
def call_detail(request: HttpRequest, pk: uuid.UUID) -> HttpResponse:
    """A call's page."""
    call = _get_call_for_reviewer(request, pk)
    return render(request, "approvals/call.html", call_context(call, request.user))


@require_GET
@reviewer_required
def call_preview(request: HttpRequest, pk: uuid.UUID) -> HttpResponse:
    """The call's dry-run panel, asking the downstream for the preview if the call has none yet.

    A GET with an effect only on our own cache of a read: the dry run changes nothing
    downstream, and a second request (another reviewer, a reload) finds it stored.
    """
    call = _get_call_for_reviewer(request, pk)
    if call.preview is None and call.status == Status.PENDING_APPROVAL:
        attach_preview(call)
    preview = call.preview or {}
    context = {"call": call, "preview": preview, "preview_rows": preview_rows(preview)}
    return render(request, "approvals/_preview_panel.html", context)


@require_GET
@reviewer_required
def call_live(request: HttpRequest, pk: uuid.UUID) -> HttpResponse:
    """The polled live part of a call's page.

    If someone edited the arguments since the page was drawn, the whole page reloads:
    a reviewer must never decide on arguments they were not shown.
    """
    call = _get_call_for_reviewer(request, pk)
    seen = request.GET.get("seen", "")
    if seen and seen != call.arguments_hash:
        return HttpResponseClientRefresh()
    return render(request, "approvals/_call_live.html", {**live_context(call, request.user), "oob": True})
