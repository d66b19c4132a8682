"""The overview: how the queue is doing, what reviewers decide, what the guards absorbed.

Every figure is a query over a bounded window (medians over the most recent
MEDIAN_SAMPLE decisions in it), so the page costs the same whatever the history.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import date, datetime, timedelta
from statistics import median

from django.contrib import messages
from django.db.models import Count, Q, QuerySet
from django.db.models.functions import TruncDate
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from agents.breakers import reset
from agents.models import CircuitBreaker
from approvals.models import ToolCall
from approvals.states import Status
from approvals.views.access import reviewer_required
from approvals.views.present import compact_duration
from approvals.views.queue import pending_count
from audit.http import ConsoleRequest
from audit.models import Event
from audit.typealiases import DjangoValue

WINDOW = timedelta(days=30)
# What medians are grouped by: a risk tier or a day.
WaitKey = int | date
# Medians are taken over at most this many recent decisions: a page load reads no more.
MEDIAN_SAMPLE = 10_000
REPLAYED_ACTION = "call.replayed"


def reviewed_calls(since: datetime) -> QuerySet[ToolCall]:
    """Return calls a person decided (approved or rejected) since `since`."""
    return ToolCall.objects.filter(created_at__gte=since, approvals_required__gt=0, decided_at__isnull=False)


def median_time_to_decision(since: datetime) -> timedelta | None:
    """Return the median time from proposal to a reviewer's decision, or None without decisions."""
    waits = [wait for _, wait in decision_waits(since, "decided_at")]
    # typeshed allows median only numbers; timedeltas sort, add and halve as it needs.
    return median(waits) if waits else None  # type: ignore[type-var]


def medians_by(since: datetime, key: str) -> list[tuple[WaitKey, timedelta, int]]:
    """Return (key value, median time to decision, decisions) for each value of `key` ("risk_tier" or "day")."""
    waits: dict[WaitKey, list[timedelta]] = defaultdict(list)
    for value, wait in decision_waits(since, key):
        waits[value].append(wait)
    # As in median_time_to_decision: typeshed allows median only numbers.
    return [(value, median(group), len(group)) for value, group in sorted(waits.items())]  # type: ignore[type-var]


def decision_waits(since: datetime, key: str) -> list[tuple[WaitKey, timedelta]]:
    """Return (value of `key`, time to decision) of the MEDIAN_SAMPLE most recent decisions since `since`."""
    calls = reviewed_calls(since).annotate(day=TruncDate("created_at")).order_by("-created_at")
    rows = calls.values_list(key, "decided_at", "created_at")[:MEDIAN_SAMPLE]
    return [(value, decided - created) for value, decided, created in rows]


def wait_rows(rows: list[tuple[WaitKey, timedelta, int]]) -> list[dict[str, DjangoValue]]:
    """Return medians ready to draw: compact text and a bar length relative to the longest (0–100)."""
    longest = max((wait for _, wait, _ in rows), default=timedelta(0)) or timedelta(seconds=1)
    return [
        {"key": key, "median": compact_duration(wait), "decided": n, "percent": round(100 * (wait / longest))}
        for key, wait, n in rows
    ]


def daily_wait_rows(since: datetime, today: date) -> list[dict[str, DjangoValue]]:
    """Return one row per day of the window, oldest first; days without decisions have no median."""
    by_day = {row["key"]: row for row in wait_rows(medians_by(since, "day"))}
    days = [today - timedelta(days=back) for back in range(WINDOW.days - 1, -1, -1)]
    return [by_day.get(day, {"key": day, "median": "", "decided": 0, "percent": 0}) for day in days]


def outcomes_per_tool(since: datetime) -> list[dict[str, DjangoValue]]:
    """Return, per tool, how many reviewed calls people approved and rejected, and how many expired."""
    reviewed = Q(approvals_required__gt=0)
    return list(
        ToolCall.objects.filter(created_at__gte=since)
        .filter(reviewed | Q(status=Status.EXPIRED))
        .values("tool__name")
        .annotate(
            approved=Count("id", filter=Q(decided_at__isnull=False) & ~Q(status=Status.REJECTED)),
            rejected=Count("id", filter=Q(status=Status.REJECTED)),
            expired=Count("id", filter=Q(status=Status.EXPIRED)),
        )
        .order_by("tool__name")
    )


def status_counts(since: datetime) -> list[tuple[str, str, int]]:
    """Return (status, label, how many calls proposed since `since` are in it), for every state."""
    rows = ToolCall.objects.filter(created_at__gte=since).values_list("status").annotate(n=Count("id"))
    counts = dict(rows.order_by())
    return [(value, label, counts.get(value, 0)) for value, label in Status.choices]


@require_GET
@reviewer_required
def overview(request: ConsoleRequest) -> HttpResponse:
    """Pending count, median time to decision, outcomes per tool, replays absorbed, open breakers."""
    since = timezone.now() - WINDOW
    wait = median_time_to_decision(since)
    context = {
        "window_days": WINDOW.days,
        "pending": pending_count(),
        "median_wait": compact_duration(wait) if wait is not None else None,
        "decided": reviewed_calls(since).count(),
        "per_tool": outcomes_per_tool(since),
        "wait_by_tier": wait_rows(medians_by(since, "risk_tier")),
        "wait_by_day": daily_wait_rows(since, timezone.localdate()),
        "statuses": status_counts(since),
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
