"""Median with min–max over runs: how every figure is reported."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Spread:
    """The median of several runs, and their min and max."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        if not values:
            raise ValueError("no values to summarise")
        return cls(statistics.median(values), min(values), max(values))

    def format(self, digits: int = 1) -> str:
        """Return `median (min–max)` with `digits` decimals and thousands separators."""
        return f"{self.median:,.{digits}f} ({self.low:,.{digits}f}–{self.high:,.{digits}f})"


def percentile(samples: Sequence[float], pct: float) -> float:
    """Return the `pct` percentile of `samples` (nearest rank)."""
    ordered = sorted(samples)
    rank = max(1, round(pct / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


# A PostgreSQL-only statement stays only while its same-run A/B against its portable twin
# moves a headline figure by at least this much, in every run.
KEEP_RATIO = 1.10


def keep_row(label: str, ratio: Spread, kept: str = "it") -> str:
    """Return an A/B's headline row: its ratio, and whether every run's ratio earns the statement (`kept`) its place."""
    verdict = "met" if ratio.low >= KEEP_RATIO else "**missed**"
    return f"| A/B: {label} | {ratio.format(2)} | ≥ {KEEP_RATIO:.2f} to keep {kept} — {verdict} |"
