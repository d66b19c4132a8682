"""A call's page: what the agent asked for, what it would change, why it is at its tier, what happened.

The page's live part (status, approvals, result, timeline) polls while anything
can still change, so the result appears without a reload.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import connection
from django.db.models import Exists, OuterRef, Q
from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET
from django_htmx.http import HttpResponseClientRefresh

from approvals.decisions import DecisionRefused, check_may_decide, tier_of
from approvals.execution import attach_preview
from approvals.models import Decision, ToolCall
from approvals.states import DecisionKind, Status
from approvals.views.access import get_call_for_reviewer, reviewer_required
from approvals.views.present import (
    DiffRow,
    argument_rows,
    arguments_caption,
    diff_rows,
    headline,
    hidden_characters,
    preview_title,
    seconds_until,
    status_sentence,
)
from audit.http import ConsoleRequest
from audit.models import Event
from audit.typealiases import DjangoValue, JSONObject, JSONValue
from toolcatalog.models import RiskTier, Tool
from toolcatalog.sensitive import mask_arguments

TIMELINE_LIMIT = 200
# Enough of a resource's or a conversation's past to judge this call by, few enough to read.
HISTORY_LIMIT = 10
CONVERSATION_LIMIT = 20
# How often the live part refreshes: fast while a worker runs it, slower while it waits for people.
POLL_IN_FLIGHT = "1s"
POLL_PENDING = "4s"
# Context rows show a headline argument and a state, never these big columns.
CONTEXT_DEFERRED = ("preview", "result", "original_arguments", "risk_reasons", "justification")


def approvers(call: ToolCall) -> list[str]:
    """Return whose approvals of the call's current arguments, under its current tool version, count."""
    return call.approver_names()


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


def refusal_for(call: ToolCall, user: User) -> DecisionRefused | None:
    """Return why `user` could not approve this call now (None if they could), before they try.

    The page offers no Approve button with a refusal: it says why instead.
    """
    if call.status != Status.PENDING_APPROVAL:
        return None
    try:
        check_may_decide(call, user, approving=True)
    except DecisionRefused as refused:
        return refused
    return None


# How many of the oldest candidates "approve and open the next" checks against every duty.
NEXT_SCAN = 50


def next_call_for(reviewer: User, *, after: ToolCall) -> ToolCall | None:
    """Return the oldest pending call other than `after` that `reviewer` may still approve, or None.

    The query leaves out what the reviewer already approved, edited into its current
    arguments, whose agent they own, or whose tier their groups may not approve; each
    candidate is then checked by the same rules the approval applies.
    """
    decided = Decision.objects.filter(
        call=OuterRef("pk"), reviewer=reviewer, arguments_hash=OuterRef("arguments_hash")
    ).filter(Q(kind=DecisionKind.EDIT) | Q(kind=DecisionKind.APPROVE, tool_version=OuterRef("tool_version")))
    barred_tiers = RiskTier.objects.filter(approver_group__isnull=False).exclude(
        approver_group__in=reviewer.groups.all()
    )
    candidates = (
        ToolCall.objects.filter(status=Status.PENDING_APPROVAL, agent__active=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()))
        .exclude(pk=after.pk)
        .exclude(agent__owner=reviewer)
        .exclude(risk_tier__in=barred_tiers.values("level"))
        .exclude(Exists(decided))
        .select_related("agent", "tool")
        .order_by("created_at")
    )
    return next((call for call in candidates[:NEXT_SCAN] if refusal_for(call, reviewer) is None), None)


def poll_interval(call: ToolCall) -> str:
    """Return how often the live part polls, or "" once nothing can change any more."""
    if call.status in (Status.APPROVED, Status.EXECUTING):
        return POLL_IN_FLIGHT
    return POLL_PENDING if call.status == Status.PENDING_APPROVAL else ""


def result_rows(result: JSONValue) -> list[DiffRow]:
    """Return a result's fields for display: its own fields first, nested ones (order.…) after."""
    if not isinstance(result, dict):
        return []
    return sorted(diff_rows(None, result), key=lambda row: "." in row.name)


def live_context(call: ToolCall, user: User) -> dict[str, DjangoValue]:
    """Return what the live part of the page shows: state, approvals, result, timeline."""
    now = timezone.now()
    return {
        "call": call,
        "tier": tier_of(call),
        "approvers": approvers(call),
        "approvals_needed": max(call.approvals_required, 1),
        "seconds_left": seconds_until(call.expires_at, now),
        "refusal": refusal_for(call, user),
        "poll_interval": poll_interval(call),
        "result_rows": result_rows(call.result),
        # By id: a call's events are written one transaction after another, and the newest may wait to be sealed.
        "timeline": list(Event.objects.filter(call_id=call.pk).order_by("id")[:TIMELINE_LIMIT]),
        "status_sentence": status_sentence(call.status),
        "arguments_caption": arguments_caption(call.status),
        "preview_title": preview_title(call.status),
    }


def preview_rows(preview: JSONObject) -> list[DiffRow]:
    """Return the dry run as before → after rows; a run that would fail shows only the state before."""
    before, after = preview.get("before"), preview.get("after")
    return diff_rows(before, before if after is None else after)


@dataclass(frozen=True)
class RelatedCall:
    """Another call shown for context: what it asked, how it ended, who decided it."""

    call: ToolCall
    headline: tuple[str, str] | None
    approved_by: list[str]
    rejected_by: list[str]


def related_rows(calls: list[ToolCall]) -> list[RelatedCall]:
    """Return calls with their headline argument and their deciders (one query for all decisions)."""
    names: dict[uuid.UUID, dict[str, list[str]]] = {
        c.pk: {DecisionKind.APPROVE: [], DecisionKind.REJECT: []} for c in calls
    }
    decisions = Decision.objects.filter(call__in=list(names), kind__in=[DecisionKind.APPROVE, DecisionKind.REJECT])
    for call_id, kind, reviewer in decisions.order_by("created_at").values_list("call_id", "kind", "reviewer_name"):
        if reviewer not in names[call_id][kind]:
            names[call_id][kind].append(reviewer)
    return [
        RelatedCall(
            call=c,
            headline=headline(masked(c), c.tool.resource_argument),
            approved_by=names[c.pk][DecisionKind.APPROVE],
            rejected_by=names[c.pk][DecisionKind.REJECT],
        )
        for c in calls
    ]


def resource_of(call: ToolCall) -> tuple[str, JSONValue] | None:
    """Return (argument name, value) of the resource the call acts on, if its tool names one."""
    name = call.tool.resource_argument
    if not name or not isinstance(call.arguments, dict) or name not in call.arguments:
        return None
    return name, call.arguments[name]


def by_index(argument: str, value: JSONValue) -> Q:
    """Return a condition every call whose `argument` equals `value` meets, that an index can answer.

    Equal values contain each other: on PostgreSQL containment finds the candidates through
    toolcall_arguments_contain and the equality kept beside it decides. SQLite has no containment.
    """
    return Q(arguments__contains={argument: value}) if connection.features.supports_json_field_contains else Q()


def resource_history(call: ToolCall) -> list[RelatedCall]:
    """Return the latest other calls, of any tool, on the same resource (same value of its resource argument)."""
    resource = resource_of(call)
    if resource is None:
        return []
    # A refund's pedido_id and an order lookup's order_id name the same order: match each tool's own argument.
    same_resource = Q()
    for tool_id, argument in Tool.objects.exclude(resource_argument="").values_list("id", "resource_argument"):
        same_resource |= Q(by_index(argument, resource[1]), tool_id=tool_id, **{f"arguments__{argument}": resource[1]})
    calls = ToolCall.objects.filter(same_resource).exclude(pk=call.pk).select_related("agent", "tool")
    return related_rows(list(calls.defer(*CONTEXT_DEFERRED).order_by("-created_at")[:HISTORY_LIMIT]))


def conversation_calls(call: ToolCall) -> list[RelatedCall]:
    """Return the agent's other calls in the same conversation, in the order it made them."""
    if not call.conversation_id:
        return []
    calls = ToolCall.objects.filter(agent_id=call.agent_id, conversation_id=call.conversation_id).exclude(pk=call.pk)
    calls = calls.select_related("agent", "tool").defer(*CONTEXT_DEFERRED).order_by("created_at")
    return related_rows(list(calls[:CONVERSATION_LIMIT]))


def call_context(call: ToolCall, user: User) -> dict[str, DjangoValue]:
    """Return everything the call page shows."""
    preview = call.preview or {}
    previous = previous_proposal(call)
    return {
        **live_context(call, user),
        "hidden_characters": hidden_characters(call.arguments),
        "resource": resource_of(call),
        "resource_history": resource_history(call),
        "conversation_calls": conversation_calls(call),
        "arguments": argument_rows(masked(call), call.tool.input_schema),
        "edit_diff": diff_rows(masked(call, call.original_arguments), masked(call, before=call.original_arguments))
        if call.original_arguments
        else [],
        "preview": preview,
        "preview_rows": preview_rows(preview),
        "previous": previous,
        # The previous proposal is of the same tool: its stored hashes compare with this one's.
        "previous_diff": diff_rows(masked(call, previous.arguments), masked(call, before=previous.arguments))
        if previous
        else [],
    }


def masked(call: ToolCall, arguments: JSONValue = None, *, before: JSONValue = None) -> JSONValue:
    """Return `arguments` (the call's own by default) as people see them: sensitive values masked."""
    return mask_arguments(call.tool, call.arguments if arguments is None else arguments, before)


@require_GET
@reviewer_required
def call_detail(request: ConsoleRequest, pk: uuid.UUID) -> HttpResponse:
    """A call's page."""
    call = get_call_for_reviewer(request, pk)
    return render(request, "approvals/call.html", call_context(call, request.user))


@require_GET
@reviewer_required
def call_preview(request: ConsoleRequest, pk: uuid.UUID) -> HttpResponse:
    """The call's dry-run panel, asking the downstream for the preview if the call has none yet.

    A GET with an effect only on our own cache of a read: the dry run changes nothing
    downstream, and a second request (another reviewer, a reload) finds it stored.
    """
    call = get_call_for_reviewer(request, pk)
    if call.preview is None and call.status == Status.PENDING_APPROVAL:
        attach_preview(call)
    preview = call.preview or {}
    context = {
        "call": call,
        "preview": preview,
        "preview_rows": preview_rows(preview),
        "preview_title": preview_title(call.status),
    }
    return render(request, "approvals/_preview_panel.html", context)


@require_GET
@reviewer_required
def call_live(request: ConsoleRequest, pk: uuid.UUID) -> HttpResponse:
    """The polled live part of a call's page.

    If someone edited the arguments, or the tool changed (a new version), since the page
    was drawn, the whole page reloads: a reviewer must never decide on what they were not shown.
    """
    call = get_call_for_reviewer(request, pk)
    seen, version = request.GET.get("seen", ""), request.GET.get("version", "")
    if (seen and seen != call.arguments_hash) or (version and version != str(call.tool_version)):
        return HttpResponseClientRefresh()
    return render(request, "approvals/_call_live.html", {**live_context(call, request.user), "oob": True})
