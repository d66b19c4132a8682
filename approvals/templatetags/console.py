"""Template helpers for the console: money, compact ages, audit summaries, the pending badge."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django import template
from django.utils import timezone

from approvals.views import present
from approvals.views.queue import COUNT_CAP, capped_count, pending_calls

register = template.Library()


@register.filter
def brl(cents: Any) -> str:
    """Format cents as reais: {{ 800000|brl }} → R$ 8.000,00."""
    try:
        return present.format_brl(int(cents))
    except (TypeError, ValueError):
        return ""


@register.filter
def age(moment: datetime | None) -> str:
    """Return how long ago `moment` was, compactly: "3h 05m"."""
    return present.compact_duration(timezone.now() - moment) if moment else ""


@register.filter
def seconds(value: int | None) -> str:
    """Return a number of seconds compactly ("expired" once negative)."""
    if value is None:
        return ""
    return present.compact_duration(timedelta(seconds=value)) if value > 0 else "expired"


@register.filter
def window(value: timedelta | None) -> str:
    """Return an approval window compactly: 4:00:00 → "4h 00m"."""
    return present.compact_duration(value) if value is not None else ""


@register.filter
def between(end: datetime | None, start: datetime | None) -> str:
    """Return the compact duration from `start` to `end`: {{ call.finished_at|between:call.created_at }}."""
    return present.compact_duration(end - start) if end and start else ""


@register.filter
def event_summary(data: Any) -> list[tuple[str, str]]:
    """Return the few fields of an audit event's data worth showing in a list."""
    return present.event_summary(data) if isinstance(data, dict) else []


@register.inclusion_tag("approvals/_pending_badge.html")
def pending_badge() -> dict[str, Any]:
    """Render the nav's pending count (a count capped at COUNT_CAP + 1 rows)."""
    return {"pending_count": capped_count(pending_calls())}


@register.filter
def capped(count: int) -> str:
    """Show a capped count: 1001 → "1000+"."""
    return f"{COUNT_CAP}+" if count > COUNT_CAP else str(count)
