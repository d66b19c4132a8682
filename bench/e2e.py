"""Scenario 2: an auto-approved call from proposal to `succeeded`, beside a bare POST and a bare Celery round trip."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from bench.ingest import TIER0_ARGUMENTS
from bench.parameters import BenchSettings
from bench.stats import Spread, percentile

POLL_SECONDS = 0.0005
# Each run's calls are measured in this many rounds of short blocks (see `measure`).
ROUNDS_PER_RUN = 5


# The bench's copy of search_seats whose downstream answers at once (bench/downstream.py).
INSTANT_TOOL = "search_seats_instant"


@dataclass
class E2EResults:
    """Latency samples (ms) per run for each measurement.

    `instant`: Gatehouse's tier-0 call against a downstream that answers at once, i.e.
    its own cost, like for like with the bare measurements; `demo_service`: the same
    call against the demo seat service (a Django view on the same web server).
    """

    instant: list[list[float]] = field(default_factory=list)
    demo_service: list[list[float]] = field(default_factory=list)
    bare_post: list[list[float]] = field(default_factory=list)
    bare_celery: list[list[float]] = field(default_factory=list)
    # The bare composite: a bare POST that queues the bare task and waits to be told (not judged: the floor).
    bare_composite: list[list[float]] = field(default_factory=list)
    # The bare governed shape: the composite plus the round trips a governed call needs (not judged).
    bare_governed: list[list[float]] = field(default_factory=list)

    def spread(self, name: str, pct: float) -> Spread:
        return Spread.of([percentile(samples, pct) for samples in getattr(self, name)])

    def ratio(self, name: str) -> Spread:
        """Return, run by run, the p50 of `name` over (bare POST p50 + bare Celery round-trip p50)."""
        ratios = [
            percentile(mine, 50) / (percentile(post, 50) + percentile(celery, 50))
            for mine, post, celery in zip(getattr(self, name), self.bare_post, self.bare_celery, strict=True)
        ]
        return Spread.of(ratios)

    def over(self, name: str, other: str) -> Spread:
        """Return, run by run, the p50 of `name` over the p50 of `other`."""
        pairs = zip(getattr(self, name), getattr(self, other), strict=True)
        return Spread.of([percentile(mine, 50) / percentile(theirs, 50) for mine, theirs in pairs])


def _timed(action: object) -> float:
    started = time.perf_counter()
    action()  # type: ignore[operator]
    return (time.perf_counter() - started) * 1000


def add_instant_tool(settings: BenchSettings, agent_name: str) -> None:
    """Add INSTANT_TOOL: search_seats with the instant downstream as its endpoint, granted to `agent_name`."""
    from agents.models import Agent, Grant
    from toolcatalog.models import Tool

    tool = Tool.objects.get(name="search_seats")
    tool.pk, tool.name = None, INSTANT_TOOL
    tool.executor_ref = settings.instant_endpoint
    tool.save()
    Grant.objects.create(agent=Agent.objects.get(name=agent_name), tool=tool, max_tier=0)


def gatehouse_round_trip(client: httpx.Client, token: str, tool: str = "search_seats") -> None:
    """Propose a tier-0 call and wait (long poll) until it has run and been verified."""
    body = {"tool": tool, "arguments": TIER0_ARGUMENTS, "idempotency_key": f"e2e-{uuid.uuid4().hex}"}
    response = client.post("/api/v1/tool-calls?wait=10", json=body, headers={"Authorization": f"Bearer {token}"})
    status = response.json().get("status")
    if response.status_code != 201 or status != "succeeded":
        raise RuntimeError(f"auto-approved call ended {response.status_code} {status}: {response.text[:300]}")


def _bare_body() -> dict[str, object]:
    """The same kind of body as a proposal's, with a fresh key (the bare table's key is unique)."""
    return {"tool": "search_seats", "arguments": TIER0_ARGUMENTS, "idempotency_key": f"e2e-{uuid.uuid4().hex}"}


def bare_post(client: httpx.Client) -> None:
    """POST the same kind of body to the bare insert endpoint."""
    if client.post("/bench/insert", json=_bare_body()).status_code != 201:
        raise RuntimeError("the bare endpoint did not answer 201")


def bare_composite(client: httpx.Client) -> None:
    """POST the same body to the bare composite: insert, queue, the worker marks the row, the request is told."""
    if client.post("/bench/insert-and-wait", json=_bare_body()).status_code != 201:
        raise RuntimeError("the bare composite did not answer 201")


def bare_governed(client: httpx.Client) -> None:
    """POST to the bare governed shape: read, insert, queue; the worker claims, calls the downstream, records, tells."""
    if client.post("/bench/governed-and-wait", json=_bare_body()).status_code != 201:
        raise RuntimeError("the bare governed shape did not answer 201")


def bare_celery_round_trip() -> float:
    """Enqueue the bare task for a fresh row and poll until the worker marked it; return ms."""
    from django.db import connection

    from bench.bare.models import BareRow
    from config.celery import app

    row = BareRow.objects.create(key=f"celery-{uuid.uuid4().hex}", payload={})
    started = time.perf_counter()
    app.send_task("bench.bare.touch", kwargs={"row_id": row.pk})
    with connection.cursor() as cursor:
        while True:
            cursor.execute("SELECT done_at IS NOT NULL FROM bench_bare_barerow WHERE id = %s", [row.pk])
            if cursor.fetchone()[0]:
                return (time.perf_counter() - started) * 1000
            if time.perf_counter() - started > 30:
                raise RuntimeError("the worker did not run the bare task within 30 s")
            time.sleep(POLL_SECONDS)


def measure(settings: BenchSettings, tokens: dict[str, str], log: object = print) -> E2EResults:
    """Measure the latencies sequentially (one client), `settings.runs` times, in interleaved blocks."""
    results = E2EResults()
    agent = "box-office-agent"
    token = tokens[agent]
    add_instant_tool(settings, agent)
    with httpx.Client(base_url=settings.base_url, timeout=30) as client:
        block = max(1, settings.e2e_calls // ROUNDS_PER_RUN)
        # Each measurement (an E2EResults field): one sample in ms, and how many a block takes.
        measurements: dict[str, tuple[Callable[[], float], int]] = {
            "demo_service": (lambda: _timed(lambda: gatehouse_round_trip(client, token)), block),
            "instant": (lambda: _timed(lambda: gatehouse_round_trip(client, token, INSTANT_TOOL)), block),
            "bare_post": (lambda: _timed(lambda: bare_post(client)), block * 2),
            "bare_celery": (bare_celery_round_trip, block * 2),
            "bare_composite": (lambda: _timed(lambda: bare_composite(client)), block),
            "bare_governed": (lambda: _timed(lambda: bare_governed(client)), block),
        }
        for _ in range(5):  # warm: connections, producer pool, compiled validators
            for once, _per_block in measurements.values():
                once()
        for run in range(1, settings.runs + 1):
            samples: dict[str, list[float]] = {name: [] for name in measurements}
            # Short blocks, one of each in turn: a slow spell of the machine (a checkpoint,
            # a neighbour's job) falls on every measurement of the run alike.
            for _ in range(ROUNDS_PER_RUN):
                for name, (once, per_block) in measurements.items():
                    samples[name] += [once() for _ in range(per_block)]
            for name, values in samples.items():
                getattr(results, name).append(values)
            log(
                f"  e2e run {run}: gatehouse p50 {percentile(results.instant[-1], 50):.1f} ms with the instant "
                f"downstream, {percentile(results.demo_service[-1], 50):.1f} ms with the demo service, "
                f"bare POST p50 {percentile(results.bare_post[-1], 50):.1f} ms, "
                f"bare Celery p50 {percentile(results.bare_celery[-1], 50):.1f} ms, "
                f"bare composite p50 {percentile(results.bare_composite[-1], 50):.1f} ms, "
                f"bare governed shape p50 {percentile(results.bare_governed[-1], 50):.1f} ms"
            )
    return results
