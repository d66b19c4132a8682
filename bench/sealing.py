"""The audit sequencer: how fast it seals a backlog, and how long events waited to be sealed during ingest.

Throughput: `BACKLOG_EVENTS` unsealed events (with their digests, as writers insert
them) are COPYed in and committed at once; the stack's own `audit_sequencer` process
seals them, and the time from the commit until none waits gives events/s. The A/B
of the seal statement (audit/store.py's `write_seals`): with the stack's sequencer
stopped, this process seals `STATEMENT_EVENTS`-event backlogs itself, in turn with
PostgreSQL's UPDATE and with its portable twin (the ORM's bulk_update, which SQLite
runs), alternating which goes first. Delay:
for every event created during the ingest scenario, `sealed_at − created_at` (the
time it was stamped, just before its INSERT, to the time its batch was sealed).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from bench.stats import Spread, keep_row

BACKLOG_EVENTS = 200_000
# The portable twin seals a few thousand events a second: a smaller backlog keeps its runs short.
STATEMENT_EVENTS = 20_000
THROUGHPUT_TARGET = 50_000
DELAY_TARGET_MS = 1000.0
SEALED_TIMEOUT = 300.0

DELAY_SQL = """
SELECT count(*),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM sealed_at - created_at)),
       percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM sealed_at - created_at)),
       max(extract(epoch FROM sealed_at - created_at))
FROM audit_event WHERE created_at >= %s AND created_at < %s AND seq IS NOT NULL
"""


@dataclass(frozen=True)
class SealingDelay:
    """How long the events created in a time window waited to be sealed."""

    events: int
    p50_ms: float
    p99_ms: float
    max_ms: float


@dataclass(frozen=True)
class BacklogRun:
    events: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.events / self.seconds


@dataclass
class SealingResults:
    backlog: list[BacklogRun] = field(default_factory=list)
    # The seal statement's A/B, run by run: PostgreSQL's UPDATE, its portable twin.
    statement: list[BacklogRun] = field(default_factory=list)
    portable: list[BacklogRun] = field(default_factory=list)

    def rate(self) -> Spread:
        return Spread.of([run.rate for run in self.backlog])

    def statement_ratio(self) -> Spread:
        """Return the seal statement's events/s ÷ its portable twin's, run by run."""
        return Spread.of([a.rate / b.rate for a, b in zip(self.statement, self.portable, strict=True)])


def wait_sealed(timeout: float = SEALED_TIMEOUT) -> float:
    """Return once no event waits to be sealed (seconds waited); fail after `timeout`."""
    from audit.store import any_unsealed

    started = time.monotonic()
    while any_unsealed():
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"events still wait to be sealed after {timeout:.0f} s: is the sequencer running?")
        time.sleep(0.01)
    return time.monotonic() - started


def delay(since: datetime, until: datetime) -> SealingDelay:
    """Return how long the events created in [since, until) waited to be sealed (all of them sealed first)."""
    from django.db import connection

    wait_sealed()
    with connection.cursor() as cursor:
        cursor.execute(DELAY_SQL, [since, until])
        count, p50, p99, worst = cursor.fetchone()
    return SealingDelay(int(count), float(p50 or 0) * 1000, float(p99 or 0) * 1000, float(worst or 0) * 1000)


def backlog_rows(count: int) -> Iterator[tuple[Any, ...]]:
    """Yield `count` unsealed events as a writer inserts them: content, stamp and digest, no chain values."""
    from bench.dataset import CALL_ID, STEPS, event_content, event_data

    created = datetime.now(UTC).isoformat()
    for n in range(count):
        action, kind, name, _ = STEPS[n % 4]
        call, data = CALL_ID % n, event_data(n)
        digest = hashlib.sha256(event_content(n, created, call, data).encode()).hexdigest()
        yield (created, kind, name, action, call, "support-agent", "emitir_estorno", data, digest)


def insert_backlog(count: int) -> None:
    """COPY `count` unsealed events in, committed at once."""
    from django.db import connection, transaction

    from bench.dataset import copy_rows

    columns = "created_at, actor_kind, actor_name, action, call_id, agent_name, tool_name, data, digest"
    with transaction.atomic(), connection.cursor() as cursor:
        copy_rows(cursor, f"COPY audit_event ({columns}) FROM STDIN", backlog_rows(count))


def seal_backlog(count: int = BACKLOG_EVENTS) -> BacklogRun:
    """Commit a backlog of `count` events and time the running sequencer sealing all of it."""
    wait_sealed()
    insert_backlog(count)
    return BacklogRun(count, wait_sealed())


def measure(runs: int, count: int = BACKLOG_EVENTS, log: Callable[[str], None] = print) -> SealingResults:
    """Seal a backlog `runs` times; return the runs."""
    results = SealingResults()
    for run in range(1, runs + 1):
        results.backlog.append(seal_backlog(count))
        log(f"  sealing run {run}: {count:,} events in {results.backlog[-1].seconds:.2f} s")
    return results


def seal_in_process(count: int, postgresql_statements: bool) -> BacklogRun:
    """Commit a backlog of `count` events and seal it in this process, with or without the store's statements."""
    from django.test import override_settings

    from audit.sequencer import seal_all

    seal_all()  # whatever else waits: the stack's sequencer is stopped
    insert_backlog(count)
    started = time.monotonic()
    with override_settings(GATEHOUSE_POSTGRESQL_STORE=postgresql_statements):
        sealed = seal_all()
    seconds = time.monotonic() - started
    if sealed < count:  # more is an event committed meanwhile, sealed with the backlog
        raise RuntimeError(f"sealed {sealed:,} of a {count:,}-event backlog: did another sealer run?")
    return BacklogRun(count, seconds)


def measure_statement(
    results: SealingResults, runs: int, count: int = STATEMENT_EVENTS, log: Callable[[str], None] = print
) -> SealingResults:
    """The seal statement's A/B (no other sealer running): `runs` pairs, alternating which goes first."""
    for run in range(1, runs + 1):
        for postgresql_statements in (True, False) if run % 2 else (False, True):
            side = results.statement if postgresql_statements else results.portable
            side.append(seal_in_process(count, postgresql_statements))
        log(
            f"  seal statement run {run}: PostgreSQL's {results.statement[-1].rate:,.0f} events/s, "
            f"portable twin's {results.portable[-1].rate:,.0f} events/s"
        )
    return results


def headline_rows(sealing: SealingResults | None, during_ingest: SealingDelay | None) -> list[str]:
    """Return the headline table's rows for the sequencer (none for results saved before it was measured)."""
    rows = []
    if sealing is not None and sealing.backlog:
        rate = sealing.rate()
        rows.append(
            f"| sequencer: events sealed/s from a {sealing.backlog[0].events:,}-event backlog | {rate.format(0)} | "
            f"≥ {THROUGHPUT_TARGET:,} — {'met' if rate.low >= THROUGHPUT_TARGET else '**missed**'} |"
        )
    if sealing is not None and getattr(sealing, "statement", None):
        label = "sequencer events sealed/s with the store's PostgreSQL UPDATE ÷ with its portable twin"
        rows.append(keep_row(label, sealing.statement_ratio()))
    if during_ingest is not None:
        met = during_ingest.p99_ms < DELAY_TARGET_MS
        rows.append(
            f"| sealing delay p99 during ingest (ms) | {during_ingest.p99_ms:.0f} | "
            f"< {DELAY_TARGET_MS:.0f} — {'met' if met else '**missed**'} |"
        )
    return rows


def section(sealing: SealingResults | None, during_ingest: SealingDelay | None) -> list[str]:
    """Return the report's section on the sequencer."""
    if sealing is None and during_ingest is None:
        return []
    lines = ["## 1b. The audit sequencer", "", __doc__.split("\n\n", 1)[1].replace("\n", " ").strip(), ""]
    if during_ingest is not None:
        d = during_ingest
        lines += [
            f"During ingest: {d.events:,} events, sealed after p50 {d.p50_ms:.0f} ms, p99 {d.p99_ms:.0f} ms, "
            f"at most {d.max_ms:.0f} ms.",
            "",
        ]
    if sealing is not None and sealing.backlog:
        seconds = Spread.of([run.seconds for run in sealing.backlog]).format(2)
        lines += [
            f"Backlog: {sealing.backlog[0].events:,} events, {len(sealing.backlog)} runs: {seconds} s, "
            f"**{sealing.rate().format(0)} events/s**.",
            "",
        ]
    if sealing is not None and getattr(sealing, "statement", None):
        statement = Spread.of([run.rate for run in sealing.statement]).format(0)
        portable = Spread.of([run.rate for run in sealing.portable]).format(0)
        lines += [
            f"Seal statement A/B, {sealing.statement[0].events:,}-event backlogs sealed in the bench's process, "
            f"{len(sealing.statement)} pairs: PostgreSQL's UPDATE {statement} events/s, its portable twin "
            f"{portable} events/s (ratio {sealing.statement_ratio().format(2)}).",
            "",
        ]
    return lines
