"""Scenario 4: `manage.py audit_verify` over the whole chain, timed by itself and by /usr/bin/time.

The A/B of the walk's statement (audit/store.py's `sealed_range`, read by one walker
process per CPU): `audit_verify` over the bench's `walk_ab_events` with it and with its
portable twin (`GATEHOUSE_POSTGRESQL_STORE=0`: the sequential ORM walk that SQLite
runs), alternating which goes first. The twin walks in one process, so the A/B runs on
a chain of its own size rather than the large one.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.parameters import BASE_DIR, PYTHON
from bench.stats import Spread, keep_row

RESULT = re.compile(r"audit chain intact: (\d+) events in ([\d.]+) s")
TIME_FORMAT = "TIME %e %M"  # wall seconds, max resident KiB
# One walk of the large chain (10,000,000 events) takes under a minute at issue 27's 250,000 events/s: a walk
# still running after this long is stuck, not slow, and the bench should say so rather than wait for ever.
TIMEOUT = 1800.0


@dataclass(frozen=True)
class VerifyRun:
    events: int
    seconds: float
    wall_seconds: float
    max_rss_mib: float

    @property
    def rate(self) -> float:
        return self.events / self.seconds


def command() -> list[str]:
    """Return the timed command line."""
    return ["/usr/bin/time", "-f", TIME_FORMAT, PYTHON, "manage.py", "audit_verify"]


def run_once(env: dict[str, str]) -> VerifyRun:
    """Run audit_verify once; fail if the chain does not verify."""
    try:
        done = subprocess.run(command(), cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"audit_verify still running after {TIMEOUT:.0f} s") from None
    found = RESULT.search(done.stdout)
    timing = next((line.split() for line in done.stderr.splitlines() if line.startswith("TIME ")), None)
    if done.returncode != 0 or found is None or timing is None:
        raise RuntimeError(f"audit_verify failed ({done.returncode}):\n{done.stdout}\n{done.stderr[-2000:]}")
    return VerifyRun(int(found[1]), float(found[2]), float(timing[1]), int(timing[2]) / 1024)


@dataclass
class WalkAB:
    """The walk's A/B, run by run: the store's statement (parallel walkers), its portable twin."""

    statement: list[VerifyRun] = field(default_factory=list)
    portable: list[VerifyRun] = field(default_factory=list)

    def ratio(self) -> Spread:
        """Return audit_verify's events/s with the store's statement ÷ with its portable twin, run by run."""
        return Spread.of([a.rate / b.rate for a, b in zip(self.statement, self.portable, strict=True)])


def measure_walk(env: dict[str, str], runs: int, log: Callable[[str], None] = print) -> WalkAB:
    """The walk's A/B: `runs` pairs of audit_verify over the chain as it is, alternating which goes first."""
    results = WalkAB()
    for number in range(1, runs + 1):
        for statement in (True, False) if number % 2 else (False, True):
            side = results.statement if statement else results.portable
            side.append(run_once({**env, "GATEHOUSE_POSTGRESQL_STORE": "1" if statement else "0"}))
        log(
            f"  walk A/B run {number}: {results.statement[-1].events:,} events, the store's walk "
            f"{results.statement[-1].rate:,.0f} events/s, its portable twin {results.portable[-1].rate:,.0f}"
        )
    return results


def headline_rows(walk: WalkAB | None) -> list[str]:
    """Return the walk A/B's headline row (none for results saved before it was measured)."""
    if walk is None or not walk.statement:
        return []
    label = "audit_verify events/s with the store's walk ÷ with its portable twin"
    return [keep_row(f"{label}, {walk.statement[0].events:,} events", walk.ratio())]


def section_lines(walk: WalkAB | None) -> list[str]:
    """Return the walk A/B's lines of the report's audit_verify section."""
    if walk is None or not walk.statement:
        return []
    statement = Spread.of([run.rate for run in walk.statement]).format(0)
    portable = Spread.of([run.rate for run in walk.portable]).format(0)
    return [
        __doc__.split("\n\n", 1)[1].replace("\n", " ").strip(),
        "",
        f"Walk A/B over {walk.statement[0].events:,} events, {len(walk.statement)} pairs: the store's walk "
        f"{statement} events/s, its portable twin {portable} events/s (ratio {walk.ratio().format(2)}).",
        "",
    ]


def measure(env: dict[str, str], runs: int, log: object = print) -> list[VerifyRun]:
    """Run audit_verify `runs` times."""
    results = []
    for number in range(1, runs + 1):
        result = run_once(env)
        results.append(result)
        log(
            f"  audit_verify run {number}: {result.events:,} events in {result.seconds:.2f} s = "
            f"{result.rate:,.0f} events/s (wall {result.wall_seconds:.1f} s, max RSS {result.max_rss_mib:.0f} MiB)"
        )
    return results


def rate(results: list[VerifyRun]) -> Spread:
    return Spread.of([r.rate for r in results])
