"""The overview: how the queue is doing, what reviewers decide, what the guards absorbed.

Every figure is a query over a bounded window (medians over the most recent
MEDIAN_SAMPLE decisions in it), so the page costs the same whatever the history.
The decisions' figures read the index toolcall_review_outcome, never the pending
backlog; "pending now" and the calls by state sum the calls' tally (approvals.tally).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from statistics import median

from django.contrib import messages
from django.db.models import Count, DurationField, ExpressionWrapper, F, Q, QuerySet
from django.db.models.functions import TruncDate
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from agents.breakers import reset
from agents.models import CircuitBreaker
from approvals import tally
from approvals.models import ToolCall
from approvals.states import Status
from approvals.views.access import reviewer_required
from approvals.views.present import compact_duration
from approvals.views.queue import pending_count
from audit.http import ConsoleRequest
from audit.models import Event
from audit.typealiases import DjangoValue
from toolcatalog.models import Tool

WINDOW = timedelta(days=30)
# What medians are grouped by: a risk tier or a day.
WaitKey = int | date
# Medians are taken over at most this many recent decisions: a page load reads no more.
MEDIAN_SAMPLE = 10_000
REPLAYED_ACTION = "call.replayed"
# The calls whose outcome a person decided or let lapse: the condition of the index toolcall_review_outcome,
# written the same way so its queries can use it. Pending and autonomous calls count in none of its figures.
REVIEW_OUTCOME = Q(approvals_required__gt=0, decided_at__isnull=False) | Q(status__in=[Status.REJECTED, Status.EXPIRED])


def reviewed_calls(since: datetime) -> QuerySet[ToolCall]:
    """Return calls a person decided (approved or rejected) since `since`."""
    return ToolCall.objects.filter(created_at__gte=since, approvals_required__gt=0, decided_at__isnull=False)


@dataclass(frozen=True)
class Wait:
    """One decision of the sample: the call's tier, the day it was proposed, how long it waited."""

    risk_tier: int | None
    day: date
    wait: timedelta


def decision_sample(since: datetime) -> list[Wait]:
    """Return the MEDIAN_SAMPLE most recent decisions since `since`, from one query (every median reads it)."""
    waited = ExpressionWrapper(F("decided_at") - F("created_at"), output_field=DurationField())
    calls = reviewed_calls(since).annotate(day=TruncDate("created_at"), waited=waited).order_by("-created_at")
    # One duration a row, not two timestamps: converting ten thousand rows is most of this query's cost.
    return [Wait(*row) for row in calls.values_list("risk_tier", "day", "waited")[:MEDIAN_SAMPLE]]


def median_wait(sample: list[Wait]) -> timedelta | None:
    """Return the median time from proposal to a reviewer's decision, or None without decisions."""
    # typeshed allows median only numbers; timedeltas sort, add and halve as it needs.
    return median([w.wait for w in sample]) if sample else None  # type: ignore[type-var]


def medians_by(sample: list[Wait], key: str) -> list[tuple[WaitKey, timedelta, int]]:
    """Return (key value, median time to decision, decisions) for each value of `key` ("risk_tier" or "day")."""
    waits: dict[WaitKey, list[timedelta]] = defaultdict(list)
    for w in sample:
        waits[getattr(w, key)].append(w.wait)
    # As in median_wait: typeshed allows median only numbers.
    return [(value, median(group), len(group)) for value, group in sorted(waits.items())]  # type: ignore[type-var]


def wait_rows(rows: list[tuple[WaitKey, timedelta, int]]) -> list[dict[str, DjangoValue]]:
    """Return medians ready to draw: compact text and a bar length relative to the longest (0–100)."""
    longest = max((wait for _, wait, _ in rows), default=timedelta(0)) or timedelta(seconds=1)
    return [
        {"key": key, "median": compact_duration(wait), "decided": n, "percent": round(100 * (wait / longest))}
        for key, wait, n in rows
    ]


def daily_wait_rows(sample: list[Wait], today: date) -> list[dict[str, DjangoValue]]:
    """Return one row per day of the window, oldest first; days without decisions have no median."""
    by_day = {row["key"]: row for row in wait_rows(medians_by(sample, "day"))}
    days = [today - timedelta(days=back) for back in range(WINDOW.days - 1, -1, -1)]
    return [by_day.get(day, {"key": day, "median": "", "decided": 0, "percent": 0}) for day in days]


def outcomes_per_tool(since: datetime) -> list[dict[str, DjangoValue]]:
    """Return, per tool, how many reviewed calls people approved and rejected, how many expired, how many decided.

    A tool appears once a call of it in the window was decided, rejected or expired.
    """
    counts = {row.pop("tool"): row for row in outcome_counts(since)}
    # Named after counting, in the database's order of names: the count never joins the tools.
    names = Tool.objects.filter(pk__in=counts).order_by("name").values_list("pk", "name")
    return [{"tool__name": name, **counts[pk]} for pk, name in names]


def outcome_counts(since: datetime) -> list[dict[str, DjangoValue]]:
    """Return, per tool id, the outcome counts outcomes_per_tool shows."""
    reviewed = Q(approvals_required__gt=0)
    # Counting created_at (never NULL, like id) keeps the scan inside the index: id is not in it.
    return list(
        ToolCall.objects.filter(created_at__gte=since)
        .filter(reviewed | Q(status=Status.EXPIRED))
        .filter(REVIEW_OUTCOME)
        .values("tool")
        .annotate(
            approved=Count("created_at", filter=Q(decided_at__isnull=False) & ~Q(status=Status.REJECTED)),
            rejected=Count("created_at", filter=Q(status=Status.REJECTED)),
            expired=Count("created_at", filter=Q(status=Status.EXPIRED)),
            # What reviewed_calls counts, summed over the tools on the page: no second scan of the window.
            decided=Count("created_at", filter=reviewed & Q(decided_at__isnull=False)),
        )
        .order_by()
    )


def status_counts(first_day: date) -> list[tuple[str, str, int]]:
    """Return (status, label, how many calls proposed on `first_day` or later are in it), for every state."""
    counts = tally.calls_by_status(since=first_day)
    return [(value, label, counts[value]) for value, label in Status.choices]


@require_GET
@reviewer_required
def overview(request: ConsoleRequest) -> HttpResponse:
    """Pending count, median time to decision, outcomes per tool, replays absorbed, open breakers."""
    since = timezone.now() - WINDOW
    sample = decision_sample(since)
    wait = median_wait(sample)
    per_tool = outcomes_per_tool(since)
    context = {
        "window_days": WINDOW.days,
        "pending": pending_count(),
        "median_wait": compact_duration(wait) if wait is not None else None,
        "decided": sum(row["decided"] for row in per_tool),
        "per_tool": per_tool,
        "wait_by_tier": wait_rows(medians_by(sample, "risk_tier")),
        "wait_by_day": daily_wait_rows(sample, timezone.localdate()),
        "statuses": status_counts(timezone.localdate() - timedelta(days=WINDOW.days - 1)),
        "replays": Event.objects.filter(action=REPLAYED_ACTION, created_at__gte=since).count(),
        "breakers": list(
            CircuitBreaker.objects.filter(opened_at__isnull=False).select_related("agent", "tool").order_by("opened_at")
        ),
    }
    return render(request, "approvals/overview.html", context)


@require_POST
@reviewer_required
def reset_breaker(request: ConsoleRequest, pk: int) -> HttpResponse:
    """Close an open circuit breaker, letting the agent call the tool again."""
    breaker = get_object_or_404(CircuitBreaker.objects.select_related("agent", "tool"), pk=pk)
    if reset(breaker, by=request.user.get_username()):
        messages.success(request, f"Circuit breaker of {breaker.agent.name} / {breaker.tool.name} reset.")
    else:
        messages.info(request, "That circuit breaker was already closed.")
    return redirect("approvals:overview")
