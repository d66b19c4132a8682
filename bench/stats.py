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
