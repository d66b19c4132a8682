"""Scenario 1: POST /api/v1/tool-calls under load, beside the bare insert endpoint on the same server and on
the reference server (gunicorn's sync workers)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from bench import sealing, wrk
from bench.parameters import BenchSettings
from bench.sealing import SealingDelay
from bench.stack import drain_queue
from bench.stats import Spread

CONCURRENCIES = (8, 32)
# A R$250 refund: above the R$200 autonomy, so tier 2 — held for a reviewer, nothing executes.
TIER2_ARGUMENTS = {"pedido_id": "PED-00000001", "valor_centavos": 25000, "motivo": "atraso_entrega"}
# A seat search: tier 0, approved at once, executed by the worker.
TIER0_ARGUMENTS = {"event_id": "show-sabado", "quantity": 2, "max_price_brl": 300}


def proposal(tool: str, arguments: dict[str, object]) -> str:
    """Return a proposal body whose idempotency key wrk fills in per request."""
    return json.dumps({"tool": tool, "arguments": arguments, "idempotency_key": wrk.KEY_PLACEHOLDER})


def targets(settings: BenchSettings, tokens: dict[str, str]) -> dict[str, wrk.Target]:
    """Return the endpoints measured side by side: the bare insert (on Gatehouse's server and on the reference
    server), tier-2 (twice: the A/B) and tier-0 proposals."""
    json_header = {"Content-Type": "application/json"}

    def api(agent: str) -> dict[str, str]:
        return {**json_header, "Authorization": f"Bearer {tokens[agent]}"}

    return {
        "bare": wrk.Target("POST", "/bench/insert", json_header, proposal("emitir_estorno", TIER2_ARGUMENTS)),
        # The same bare insert served by gunicorn's sync workers: plain Django as it is usually deployed.
        "bare-gunicorn": wrk.Target(
            "POST",
            "/bench/insert",
            json_header,
            proposal("emitir_estorno", TIER2_ARGUMENTS),
            base_url=settings.reference_base_url,
        ),
        "tier2": wrk.Target(
            "POST", "/api/v1/tool-calls", api("support-agent"), proposal("emitir_estorno", TIER2_ARGUMENTS)
        ),
        # The same proposal to the second web server, whose store runs its portable twins.
        "tier2-portable": wrk.Target(
            "POST",
            "/api/v1/tool-calls",
            api("support-agent"),
            proposal("emitir_estorno", TIER2_ARGUMENTS),
            base_url=settings.portable_base_url,
        ),
        "tier0": wrk.Target(
            "POST", "/api/v1/tool-calls", api("box-office-agent"), proposal("search_seats", TIER0_ARGUMENTS)
        ),
    }


@dataclass
class IngestResults:
    """Every run of every (endpoint, concurrency), in run order."""

    runs: dict[tuple[str, int], list[wrk.LoadResult]] = field(default_factory=dict)
    stored: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    lock_waits: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    drained: list[int] = field(default_factory=list)
    # How long the events written during the measured runs waited to be sealed (None before it was measured).
    sealing_delay: SealingDelay | None = None
    # Blocks per run and endpoint, pooled (1 in results saved before runs came in blocks).
    rounds: int = 1

    def add(self, name: str, connections: int, result: wrk.LoadResult, stored: int, lock_waits: float) -> None:
        self.runs.setdefault((name, connections), []).append(result)
        self.stored.setdefault((name, connections), []).append(stored)
        self.lock_waits.setdefault((name, connections), []).append(lock_waits)

    def lost(self, name: str, connections: int) -> int:
        """Return how many 2xx answers have no stored row (must be 0)."""
        pairs = zip(self.runs[(name, connections)], self.stored[(name, connections)], strict=True)
        return sum(max(0, run.requests - run.errors - stored) for run, stored in pairs)

    def spread(self, name: str, connections: int, metric: str) -> Spread:
        return Spread.of([getattr(r, metric) for r in self.runs[(name, connections)]])

    def errors(self, name: str, connections: int) -> int:
        return sum(r.errors for r in self.runs[(name, connections)])

    def ratio(self, name: str, connections: int, base: str = "bare") -> Spread:
        """Return `name`'s requests/s over `base`'s (the bare endpoint's), run by run."""
        pairs = zip(self.runs[(name, connections)], self.runs[(base, connections)], strict=True)
        return Spread.of([mine.rps / bare.rps for mine, bare in pairs])


def stored_rows(name: str, prefix: str) -> int:
    """Return how many rows the run stored (a check that every 2xx really wrote)."""
    from approvals.models import ToolCall
    from bench.bare.models import BareRow

    if name.startswith("bare"):
        return BareRow.objects.filter(key__startswith=prefix + "-").count()
    return ToolCall.objects.filter(idempotency_key__startswith=prefix + "-").count()


LOCK_WAITERS_SQL = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock' AND wait_event = 'advisory'"
)


@contextmanager
def advisory_lock_waiters(settings: BenchSettings) -> Iterator[list[int]]:
    """Sample, every 20 ms, how many sessions wait for an advisory lock (writers take none; only sealers do)."""
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        with psycopg.connect(f"{settings.pg_admin_url}/postgres", autocommit=True) as conn:
            while not stop.wait(0.02):
                samples.append(conn.execute(LOCK_WAITERS_SQL, [settings.database]).fetchone()[0])

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        stop.set()
        thread.join()


def measure(settings: BenchSettings, tokens: dict[str, str], workdir: Path, log: object = print) -> IngestResults:
    """Warm up, then run every endpoint at every concurrency, interleaved, `settings.runs` times."""
    endpoints = targets(settings, tokens)
    for name, target in endpoints.items():  # pools filled, validators compiled, workers warm
        url = target.base_url or settings.base_url
        wrk.run(url, target, connections=32, seconds=settings.warmup, prefix=f"warm-{name}", workdir=workdir)
        drain_queue(settings)
    results = IngestResults(rounds=settings.ingest_rounds)
    since = datetime.now(UTC)
    for run in range(1, settings.runs + 1):
        for connections in CONCURRENCIES:
            pooled = _run_in_rounds(settings, endpoints, run, connections, workdir, results.drained)
            for name, (result, stored, waiting) in pooled.items():
                results.add(name, connections, result, stored, waiting)
                log(
                    f"  ingest run {run} c={connections:<2} {name:<5} {result.rps:8.1f} req/s  "
                    f"p50 {result.p50_ms:6.1f} ms  p99 {result.p99_ms:6.1f} ms  errors {result.errors}  "
                    f"advisory-lock waiters {waiting:.2f}"
                )
    results.sealing_delay = sealing.delay(since, datetime.now(UTC))
    log(f"  sealing delay: p99 {results.sealing_delay.p99_ms:.0f} ms, max {results.sealing_delay.max_ms:.0f} ms")
    return results


def _run_in_rounds(
    settings: BenchSettings,
    endpoints: dict[str, wrk.Target],
    run: int,
    connections: int,
    workdir: Path,
    drained: list[int],
) -> dict[str, tuple[wrk.LoadResult, int, float]]:
    """Load every endpoint for `settings.duration` seconds in short blocks, taking turns; pool each one's blocks.

    A slow spell of the shared machine (seconds long) then falls on every endpoint of
    the run alike, instead of on the one whose turn it was. Returns, per endpoint,
    the pooled result, the rows its 2xx answers stored, and the mean advisory-lock waiters.
    """
    rounds = settings.ingest_rounds
    blocks: dict[str, list[tuple[wrk.LoadResult, int, float]]] = {name: [] for name in endpoints}
    for turn in range(rounds):
        for name, target in endpoints.items():
            prefix = f"r{run}-{name}-c{connections}-{turn}-{uuid.uuid4().hex[:6]}"  # keys unique per block
            with advisory_lock_waiters(settings) as waiters:
                result = wrk.run(
                    target.base_url or settings.base_url,
                    target,
                    connections=connections,
                    seconds=settings.duration / rounds,
                    prefix=prefix,
                    workdir=workdir,
                )
            drained.append(drain_queue(settings))
            blocks[name].append((result, stored_rows(name, prefix), sum(waiters) / len(waiters) if waiters else 0.0))
            time.sleep(0.2)
    return {
        name: (
            wrk.pooled([result for result, _, _ in done]),
            sum(stored for _, stored, _ in done),
            sum(waiting for _, _, waiting in done) / len(done),
        )
        for name, done in blocks.items()
    }
