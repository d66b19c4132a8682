"""The queue of pending calls, the activity view, and the nav's pending count.

Each page runs a fixed number of queries whatever the table sizes: one page of
rows (with agent and tool joined), one query for their approvals, one count.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db.models import Q, QuerySet
from django.db.models.fields.json import KT
from django.db.models.functions import Substr
from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from approvals import tally
from approvals.approvers import queue_refusals, tier_groups
from approvals.models import Decision, ToolCall
from approvals.states import DecisionKind, Status
from approvals.views.access import reviewer_required
from approvals.views.present import compact_duration, count_approvals, headline, seconds_until
from approvals.views.queries import QueueQueryForm, matching
from audit.http import ConsoleRequest
from audit.typealiases import DjangoValue
from toolcatalog.sensitive import mask_arguments

PAGE_SIZE = 50
COUNT_CAP = 1000
IN_FLIGHT_OR_STUCK = (Status.APPROVED, Status.EXECUTING, Status.NEEDS_RECONCILIATION)
FINISHED = (Status.REJECTED, Status.EXPIRED, Status.SUCCEEDED, Status.FAILED, Status.REFUSED)
# The big JSON columns no list needs.
LIST_DEFERRED = ("preview", "result", "original_arguments", "risk_reasons", "justification")
# A queue row shows the start of the agent's justification and whether the dry run foresaw a refusal.
JUSTIFICATION_SHOWN = 300
QUEUE_ANNOTATIONS = {
    "justification_start": Substr("justification", 1, JUSTIFICATION_SHOWN),
    # The dry run's own word for why it would fail ("refund_exceeds_order"), as text; absent when it would work.
    "would_fail": KT("preview__would_fail"),
}


def pending_calls() -> QuerySet[ToolCall]:
    """Return the calls a reviewer can still decide: pending and inside their window."""
    now = timezone.now()
    return ToolCall.objects.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now), status=Status.PENDING_APPROVAL)


def pending_count() -> int:
    """Return exactly how many calls wait for a reviewer, without counting the backlog row by row.

    The tally's pending calls, less those whose window has passed and that the sweeper
    has not expired yet (a few: found through their own partial index).
    """
    overdue = ToolCall.objects.filter(status=Status.PENDING_APPROVAL, expires_at__lte=timezone.now())
    return tally.calls_by_status()[Status.PENDING_APPROVAL] - overdue.count()


def capped_count(calls: QuerySet[ToolCall]) -> int:
    """Return how many rows `calls` has, counting no further than COUNT_CAP + 1.

    A queue page needs "more than a thousand", not the exact size of a huge backlog;
    counting at most COUNT_CAP + 1 rows keeps every refresh cheap.
    """
    return calls.order_by()[: COUNT_CAP + 1].count()


@dataclass(frozen=True)
class QueueRow:
    call: ToolCall
    tier_name: str
    headline: tuple[str, str] | None
    resource: str
    age: str
    approvals: int
    approvals_needed: int
    seconds_left: int | None
    # Why this reviewer may not approve it ("" if it is theirs to decide).
    waiting_on_others: str = ""


def resource_shown(call: ToolCall) -> str:
    """Return the value of the call's resource argument as the queue shows it (masked if sensitive)."""
    name = call.tool.resource_argument
    return str(mask_arguments(call.tool, call.arguments).get(name, "")) if name else ""


def _rows(calls: list[ToolCall], reviewer: User) -> list[QueueRow]:
    """Return queue rows from three queries for the whole page: its decisions, the tiers, the approver groups."""
    decisions = list(
        Decision.objects.filter(
            call__in=[c.pk for c in calls], kind__in=[DecisionKind.APPROVE, DecisionKind.EDIT]
        ).values_list("call_id", "arguments_hash", "tool_version", "reviewer_name", "kind", "reviewer_id")
        if calls
        else []
    )
    approvals = [(c, h, v, name) for c, h, v, name, kind, _ in decisions if kind == DecisionKind.APPROVE]
    counts = count_approvals(approvals, calls) if calls else {}
    tiers = tier_groups(reviewer)
    mine = [(c, kind, h, v) for c, h, v, _, kind, who in decisions if who == reviewer.pk]
    refusals = queue_refusals(calls, reviewer, tiers, mine) if calls else {}
    now = timezone.now()
    return [
        QueueRow(
            call=call,
            tier_name=tiers.get(call.risk_tier, ("", None, False))[0] if call.risk_tier is not None else "",
            headline=headline(mask_arguments(call.tool, call.arguments), call.tool.resource_argument),
            resource=resource_shown(call),
            age=compact_duration(now - call.created_at),
            approvals=counts.get(call.pk, 0),
            approvals_needed=max(call.approvals_required, 1),
            seconds_left=seconds_until(call.expires_at, now),
            waiting_on_others=refusals.get(call.pk, ""),
        )
        for call in calls
    ]


def _queue_context(request: ConsoleRequest) -> dict[str, DjangoValue]:
    form = QueueQueryForm(request.GET)
    filtered = matching(pending_calls().filter(**form.filters()), form.search_text())
    page = form.page_number()
    start = (page - 1) * PAGE_SIZE
    calls = list(
        filtered.select_related("agent", "tool")
        .defer(*LIST_DEFERRED)
        .annotate(**QUEUE_ANNOTATIONS)
        .order_by("-risk_tier", "created_at")[start : start + PAGE_SIZE + 1]
    )
    rows = _rows(calls[:PAGE_SIZE], request.user)
    return {
        "form": form,
        "rows": rows,
        "yours": [row for row in rows if not row.waiting_on_others],
        "others": [row for row in rows if row.waiting_on_others],
        "total": capped_count(filtered),
        "page": page,
        "first_index": start + 1,
        "last_index": start + min(len(calls), PAGE_SIZE),
        "has_next": len(calls) > PAGE_SIZE,
        "filter_query": form.filter_query(),
    }


def is_partial(request: ConsoleRequest) -> bool:
    """Return whether to answer with a fragment: an htmx request, but not a history restore."""
    return bool(request.htmx) and not request.htmx.history_restore_request


@require_GET
@vary_on_headers("HX-Request")
@reviewer_required
def queue(request: ConsoleRequest) -> HttpResponse:
    """The pending calls, highest risk then oldest first; htmx polls get just the results."""
    context = _queue_context(request)
    status = 400 if context["form"].errors else 200  # an invalid filter is not applied; the page says which
    if is_partial(request):
        return render(request, "approvals/_queue_rows.html", context, status=status)
    return render(request, "approvals/queue.html", context, status=status)


def _deciders(calls: list[ToolCall]) -> dict[uuid.UUID, list[str]]:
    """Return who approved or rejected each call, from one query."""
    names: dict[uuid.UUID, list[str]] = {call.pk: [] for call in calls}
    decisions = Decision.objects.filter(call__in=list(names), kind__in=[DecisionKind.APPROVE, DecisionKind.REJECT])
    for call_id, reviewer in decisions.order_by("created_at").values_list("call_id", "reviewer_name"):
        if reviewer not in names[call_id]:
            names[call_id].append(reviewer)
    return names


def _activity_context() -> dict[str, DjangoValue]:
    calls = ToolCall.objects.select_related("agent", "tool").defer(*LIST_DEFERRED)
    in_flight = list(calls.filter(status__in=IN_FLIGHT_OR_STUCK).order_by("created_at")[:PAGE_SIZE])
    recent = list(calls.filter(status__in=FINISHED).order_by("-created_at")[:PAGE_SIZE])
    deciders = _deciders(in_flight + recent)
    for call in in_flight + recent:
        call.deciders = deciders[call.pk]
    return {"in_flight": in_flight, "recent": recent, "now": timezone.now()}


@require_GET
@vary_on_headers("HX-Request")
@reviewer_required
def activity(request: ConsoleRequest) -> HttpResponse:
    """Calls in flight and recently decided or finished; htmx polls get just the tables."""
    template = "approvals/_activity_tables.html" if is_partial(request) else "approvals/activity.html"
    return render(request, template, _activity_context())


@require_GET
@reviewer_required
def pending_badge(request: ConsoleRequest) -> HttpResponse:
    """The nav's pending count, polled and refreshed when a decision is made."""
    return render(request, "approvals/_pending_badge.html", {"pending_count": capped_count(pending_calls())})
