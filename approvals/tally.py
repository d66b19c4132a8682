"""How many calls are in each status: PostgreSQL's tally of the calls, beside its portable twin.

On PostgreSQL, triggers (migration 0011) tally the calls in approvals.models.CallTally.
A tally row is one change: the sum of a (day, status, tier)'s rows is how many calls
proposed that day are in that status at that tier now. Reading sums a few rows a day
plus the changes since the last fold; `fold` keeps that so by summing each key's rows
into one. Folding preserves every sum whatever runs beside it: it deletes only the rows
it read (locked), and changes committed meanwhile stay to be folded next time.

The portable twin counts the calls themselves: SQLite runs it (it has no tally), and so
does PostgreSQL with `GATEHOUSE_POSTGRESQL_STORE` off. docs/benchmarks.md gives the
same-run A/B of the overview that keeps the tally.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, date, datetime, time

from django.db import transaction
from django.db.models import Count, Max, Sum

from approvals.models import CallTally, ToolCall
from audit.store import postgresql_statements

# Rows folded in one transaction: a tally left unfolded for long (beat stopped) is folded in
# several, none of which holds many locks or much memory.
FOLD_BATCH = 10_000


def calls_by_status(since: date | None = None) -> Counter[str]:
    """Return how many calls proposed on `since` (UTC) or later, or ever, are in each status."""
    if not postgresql_statements():
        calls = ToolCall.objects.all()
        if since is not None:
            calls = calls.filter(created_at__gte=datetime.combine(since, time(), tzinfo=UTC))
        return Counter(dict(calls.values_list("status").annotate(calls=Count("pk")).order_by()))
    rows = CallTally.objects.all() if since is None else CallTally.objects.filter(day__gte=since)
    sums = rows.values_list("status").annotate(calls=Sum("calls")).order_by()
    return Counter({status: calls for status, calls in sums if calls})


def calls_by_tier(status: str) -> Counter[int | None]:
    """Return how many calls are in `status`, by risk tier (None: a call refused before it was judged)."""
    if not postgresql_statements():
        counts = ToolCall.objects.filter(status=status).values_list("risk_tier").annotate(calls=Count("pk"))
        return Counter(dict(counts.order_by()))
    sums = CallTally.objects.filter(status=status).values_list("risk_tier").annotate(calls=Sum("calls")).order_by()
    return Counter({tier: calls for tier, calls in sums if calls})


def fold(limit: int = FOLD_BATCH) -> int:
    """Sum each key's rows into one, `limit` rows a transaction; return how many rows the tally has fewer."""
    last = CallTally.objects.aggregate(last=Max("id"))["last"] or 0  # rows written from here on wait for the next fold
    fewer, after = 0, 0
    while after < last:
        with transaction.atomic():
            batch = CallTally.objects.select_for_update().filter(id__gt=after, id__lte=last).order_by("id")[:limit]
            rows = list(batch.values_list("id", "day", "status", "risk_tier", "calls"))
            if not rows:
                break
            fewer += _fold_rows(rows)
        after = rows[-1][0]
    return fewer


Key = tuple[date, str, int | None]


def _fold_rows(rows: list[tuple[int, date, str, int | None, int]]) -> int:
    """Replace `rows` by one row per key with their sum (none where it is 0); return how many fewer."""
    sums: Counter[Key] = Counter()
    for _, day, status, tier, calls in rows:
        sums[day, status, tier] += calls
    kept = [CallTally(day=day, status=status, risk_tier=tier, calls=n) for (day, status, tier), n in sums.items() if n]
    if len(kept) == len(rows):
        return 0
    CallTally.objects.filter(id__in=[row[0] for row in rows]).delete()
    CallTally.objects.bulk_create(kept)
    return len(rows) - len(kept)
