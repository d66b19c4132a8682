"""Scenario 4: `manage.py audit_verify` over the whole chain, timed by itself and by /usr/bin/time."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

from bench.parameters import BASE_DIR, PYTHON
from bench.stats import Spread

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
