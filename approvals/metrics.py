"""Prometheus metrics at `/metrics`, computed from the database when scraped.

Nothing is counted in process: every figure is read at scrape time from the rows
that already record it (calls, the audit chain's events by action, notification
deliveries), so any number of web processes and workers agree, a restart loses
nothing, and a proposal pays nothing for being measured. Each scrape costs a few
aggregate queries; where a table grows all year, they read what is folded instead:
pending calls from the calls' tally (approvals/tally.py); events by action, and how
long decided calls waited, as the sweeper last folded them plus the events since
(audit/counts.py, approvals/decision_waits.py).

One exception, because the database cannot hold it: times a process went on without
Redis (`gatehouse_redis_unavailable_total`, `agents.redisclient`) are counted where they
happen. Each process answers with its own count, unless PROMETHEUS_MULTIPROC_DIR names
a directory all of a host's processes share (prometheus_client's multiprocess mode):
then with all of theirs.

The endpoint answers only `Authorization: Bearer $GATEHOUSE_METRICS_TOKEN`; with
no token configured it does not exist (404).
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Iterable, Iterator

from django.apps import apps
from django.conf import settings
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from agents import redisclient
from approvals import decision_waits, tally
from approvals.states import Status
from audit.counts import events_by_action

# An execution ends in one of these events; a retry is an attempt that failed and will run again.
EXECUTION_EVENTS = {
    "call.succeeded": "succeeded",
    "call.needs_reconciliation": "needs_reconciliation",
    "call.failed": "failed",
    "call.retry_scheduled": "retry_scheduled",
}
DECISION_EVENTS = {"call.approved": "approved", "call.rejected": "rejected", "call.expired": "expired"}
BREAKER_OPENED = "circuit.opened"
SWEEPER_RESENT = "call.requeued"
COUNTED_ACTIONS = (*EXECUTION_EVENTS, *DECISION_EVENTS, BREAKER_OPENED, SWEEPER_RESENT)


class GatehouseCollector(Collector):
    """Yield Gatehouse's metrics, read from the database at scrape time."""

    def collect(self) -> Iterator[Metric]:
        yield pending_calls()
        yield time_to_decision()
        yield from event_counters(action_counts())
        yield from notification_metrics()


def pending_calls() -> GaugeMetricFamily:
    """Return the calls waiting for a reviewer, by risk tier (from the calls' tally: no count of the backlog)."""
    gauge = GaugeMetricFamily("gatehouse_calls_pending", "Calls waiting for a reviewer's decision.", labels=["tier"])
    by_tier = tally.calls_by_tier(Status.PENDING_APPROVAL)
    for tier in sorted(by_tier, key=lambda tier: (tier is None, tier)):
        gauge.add_metric([str(tier)], by_tier[tier])
    return gauge


def time_to_decision() -> HistogramMetricFamily:
    """Return how long held calls waited from proposal to a reviewer's approval or rejection."""
    waited = decision_waits.waits()
    histogram = HistogramMetricFamily(
        "gatehouse_time_to_decision_seconds", "Time from a held call's proposal to its decision by a reviewer."
    )
    histogram.add_metric([], waited.cumulative(), sum_value=waited.seconds)
    return histogram


def action_counts() -> dict[str, int]:
    """Return how many audit events of each counted action the chain holds (folded counts and the events since)."""
    return dict(events_by_action(COUNTED_ACTIONS))


def event_counters(counts: dict[str, int]) -> Iterable[Metric]:
    """Return the counters read from the audit chain: executions, decisions, breaker openings, sweeper re-sends."""
    executions = CounterMetricFamily("gatehouse_executions", "Execution attempts by how they ended.", labels=["status"])
    for action, status in EXECUTION_EVENTS.items():
        executions.add_metric([status], counts.get(action, 0))
    decisions = CounterMetricFamily("gatehouse_decisions", "Held calls decided, by outcome.", labels=["decision"])
    for action, decision in DECISION_EVENTS.items():
        decisions.add_metric([decision], counts.get(action, 0))
    opened = CounterMetricFamily("gatehouse_breaker_openings", "Circuit breakers opened (agent and tool).")
    opened.add_metric([], counts.get(BREAKER_OPENED, 0))
    resent = CounterMetricFamily("gatehouse_sweeper_resends", "Approved calls the sweeper sent again.")
    resent.add_metric([], counts.get(SWEEPER_RESENT, 0))
    return executions, decisions, opened, resent


def notification_metrics() -> Iterable[Metric]:
    """Return notification deliveries by status and the failed ones (none when notifications are not installed)."""
    if not apps.is_installed("notifications"):
        return ()
    # By name: notifications sits above approvals and is not imported from here.
    delivery = apps.get_model("notifications", "Delivery")
    counts = dict(delivery.objects.values_list("status").annotate(n=Count("pk")).order_by())
    by_status = GaugeMetricFamily(
        "gatehouse_notification_deliveries", "Notification deliveries by status.", labels=["status"]
    )
    for status, count in sorted(counts.items()):
        by_status.add_metric([status], count)
    failed = CounterMetricFamily("gatehouse_notification_failures", "Notification deliveries that failed for good.")
    failed.add_metric([], counts.get("failed", 0))
    return by_status, failed


def registry() -> CollectorRegistry:
    """Return a registry of Gatehouse's metrics (no process metrics: they would differ per worker)."""
    holder = CollectorRegistry(auto_describe=False)
    holder.register(GatehouseCollector())
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # It registers itself, and reads every process's counts; prometheus_client leaves it unannotated.
        MultiProcessCollector(holder)  # type: ignore[no-untyped-call]
    else:
        holder.register(redisclient.UNAVAILABLE)
    return holder


def _authorized(request: HttpRequest) -> bool:
    """Return whether the request carries the metrics token (a 404 hides the endpoint when none is configured)."""
    token = settings.GATEHOUSE_METRICS_TOKEN
    if not token:
        raise Http404
    given = request.headers.get("Authorization", "")
    return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Answer a Prometheus scrape with the metrics text, or 401 without the token."""
    if not _authorized(request):
        response = HttpResponse(
            "Send 'Authorization: Bearer <metrics token>'.\n", status=401, content_type="text/plain"
        )
        response["WWW-Authenticate"] = 'Bearer realm="gatehouse-metrics"'
        return response
    return HttpResponse(generate_latest(registry()), content_type=CONTENT_TYPE_LATEST)
