"""How many events of each action the chain holds, without counting the whole chain at every read.

A row of `ActionCounts` holds the counts of the events sealed up to its `through_seq`.
`fold` (the sweeper) adds a newer row now and then; a read adds to the newest row the
events sealed after it or still waiting to be sealed. So each event is counted exactly
once, and the counts only grow, as Prometheus counters must. Two folds at once write the
same row (one insert is ignored) or rows for different heads, each of them right: no
lock is needed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection

from django.db.models import Count, Q, QuerySet

from audit.models import ActionCounts, Event
from audit.store import sealed_head

# Seqs one fold counts: a sweeper stopped for long catches up over several sweeps, none of them long.
FOLD_SPAN = 1_000_000


def events_by_action(actions: Collection[str]) -> Counter[str]:
    """Return how many committed events of each of `actions` the chain holds, sealed or waiting to be."""
    through, folded = newest()
    recent = unfolded(through).filter(action__in=actions)
    counts = Counter({action: n for action, n in folded.items() if action in actions})
    counts.update(_by_action(recent))
    return counts


def fold(span: int = FOLD_SPAN) -> int:
    """Record the counts through the sealed head (at most `span` seqs further); return how many events it added."""
    through, folded = newest()
    upto = fold_end(through, span)
    if upto <= through:
        return 0
    added = _by_action(Event.objects.filter(seq__gt=through, seq__lte=upto))
    ActionCounts.objects.bulk_create(
        [ActionCounts(through_seq=upto, by_action=dict(Counter(folded) + added))], ignore_conflicts=True
    )
    ActionCounts.objects.filter(through_seq__lt=through).delete()  # the newest two stay
    return added.total()


def unfolded(through: int) -> QuerySet[Event]:
    """Return the committed events a fold through `through` left out: sealed after it, or waiting to be sealed."""
    return Event.objects.filter(Q(seq__gt=through) | Q(seq__isnull=True))


def fold_end(through: int, span: int) -> int:
    """Return the seq the next fold after `through` reaches: the sealed head, or `span` seqs on if that is nearer."""
    return min(sealed_head()[0], through + span)


def newest() -> tuple[int, dict[str, int]]:
    """Return the newest fold's (through_seq, counts by action); (0, {}) before the first."""
    row = ActionCounts.objects.order_by("-through_seq").values_list("through_seq", "by_action").first()
    return row if row is not None else (0, {})


def _by_action(events: QuerySet[Event]) -> Counter[str]:
    return Counter(dict(events.values_list("action").annotate(n=Count("pk")).order_by()))
