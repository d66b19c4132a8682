"""How long held calls waited for a reviewer's decision, without reading every decision at every scrape.

A decision is a `call.approved` or `call.rejected` event (each is a reviewer's: a
standing approval or an auto-approval records none); it waited from its call's proposal
to the event. A row of `DecisionWaits` holds the histogram of the decisions sealed up to
its `through_seq`; `fold` (the sweeper) adds a newer row now and then, and a read adds
to the newest row the decisions sealed after it or still waiting to be sealed, as
audit/counts.py does for the events by action. Each decision is observed once, when it
is recorded, so the histogram only grows, as Prometheus requires: a call that returns
for approval keeps its first decision observed, and its next is observed too.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from django.db.models import QuerySet

from approvals.models import DecisionWaits, ToolCall
from audit.counts import fold_end, unfolded
from audit.models import Event

DECISIONS = ("call.approved", "call.rejected")
# Seconds from proposal to a reviewer's decision: a minute to a day.
BUCKETS = (60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 24 * 3600.0)
# Seqs one fold reads: a sweeper stopped for long catches up over several sweeps, none of them long
# (a fold holds at most this many decisions in memory).
FOLD_SPAN = 200_000
# Calls looked up by id in one query.
CALLS_PER_READ = 5_000


@dataclass(frozen=True)
class Waits:
    """Decisions by how long they waited (`counts`, one per bucket and one above them all) and the seconds summed."""

    counts: tuple[int, ...] = (0,) * (len(BUCKETS) + 1)
    seconds: float = 0.0

    @classmethod
    def of(cls, waited: list[float]) -> Waits:
        """Return the histogram of `waited` (seconds each)."""
        counts = [0] * (len(BUCKETS) + 1)
        for seconds in waited:
            counts[bisect_left(BUCKETS, seconds)] += 1  # the first bound it does not exceed
        return cls(tuple(counts), sum(waited))

    def __add__(self, other: Waits) -> Waits:
        return Waits(tuple(a + b for a, b in zip(self.counts, other.counts, strict=True)), self.seconds + other.seconds)

    def cumulative(self) -> list[tuple[str, int]]:
        """Return Prometheus' buckets: decisions that waited at most each bound, then all of them (`+Inf`)."""
        running, buckets = 0, []
        for bound, count in zip([*map(str, BUCKETS), "+Inf"], self.counts, strict=True):
            running += count
            buckets.append((bound, running))
        return buckets


def waits() -> Waits:
    """Return every recorded decision's wait: the newest fold plus the decisions since, sealed or not."""
    through, folded = newest()
    return folded + _observed(unfolded(through))


def fold(span: int = FOLD_SPAN) -> int:
    """Record the waits through the sealed head (at most `span` seqs further); return how many decisions it added."""
    through, folded = newest()
    upto = fold_end(through, span)
    if upto <= through:
        return 0
    added = _observed(Event.objects.filter(seq__gt=through, seq__lte=upto))
    total = folded + added
    DecisionWaits.objects.bulk_create(
        [DecisionWaits(through_seq=upto, counts=list(total.counts), waited_seconds=total.seconds)],
        ignore_conflicts=True,
    )
    DecisionWaits.objects.filter(through_seq__lt=through).delete()  # the newest two stay
    return sum(added.counts)


def newest() -> tuple[int, Waits]:
    """Return the newest fold's through_seq and waits; (0, no decisions) before the first."""
    row = DecisionWaits.objects.order_by("-through_seq").values_list("through_seq", "counts", "waited_seconds").first()
    return (0, Waits()) if row is None else (row[0], Waits(tuple(row[1]), row[2]))


def _observed(events: QuerySet[Event]) -> Waits:
    """Return the waits of the decisions among `events`, each from its call's proposal (a call since deleted: none)."""
    decided = list(events.filter(action__in=DECISIONS, call_id__isnull=False).values_list("call_id", "created_at"))
    proposed: dict[UUID, datetime] = {}
    for start in range(0, len(decided), CALLS_PER_READ):
        ids = [call_id for call_id, _ in decided[start : start + CALLS_PER_READ]]
        proposed.update(ToolCall.objects.filter(pk__in=ids).values_list("pk", "created_at"))
    return Waits.of([(at - proposed[call_id]).total_seconds() for call_id, at in decided if call_id in proposed])
