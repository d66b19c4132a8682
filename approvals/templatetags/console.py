"""Template helpers for the console: money, compact ages, audit summaries, the pending badge, hidden characters."""

from __future__ import annotations

from datetime import datetime, timedelta

from django import template
from django.utils import timezone
from django.utils.html import conditional_escape, format_html, format_html_join
from django.utils.safestring import SafeData, SafeString

from approvals.views import present
from approvals.views.queue import COUNT_CAP, capped_count, pending_calls
from audit.typealiases import JSONValue

register = template.Library()


@register.filter
def brl(cents: JSONValue) -> str:
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
def event_summary(data: JSONValue) -> list[tuple[str, str]]:
    """Return the few fields of an audit event's data worth showing in a list."""
    return present.event_summary(data) if isinstance(data, dict) else []


@register.simple_tag
def pending_now() -> int:
    """Return how many calls wait for a reviewer, capped at COUNT_CAP + 1 (the page title and badge share it)."""
    return capped_count(pending_calls())


@register.inclusion_tag("approvals/_pending_badge.html")
def pending_badge(count: int | None = None) -> dict[str, int]:
    """Render the nav's pending count (a count capped at COUNT_CAP + 1 rows), counting unless given it."""
    return {"pending_count": pending_now() if count is None else count}


@register.filter
def capped(count: int) -> str:
    """Show a capped count: 1001 → "1000+"."""
    return f"{COUNT_CAP}+" if count > COUNT_CAP else str(count)


@register.filter
def reveal(value: JSONValue) -> SafeString:
    """Return `value` as safe HTML in which every hidden character is a marked, labelled span.

    A right-to-left override or a zero-width space changes what a reviewer reads without
    being seen; spelling each one out ("⟨U+202E⟩") makes the text mean what it shows.
    """
    text = "" if value is None else str(value)
    # Already-safe HTML (another filter's output) is kept as it is; anything else is escaped.
    keep = isinstance(value, SafeData)
    parts = (
        format_html(
            '<mark class="hidden-char" title="{}">{}</mark>', present.codepoint_name(c), present.codepoint_label(c)
        )
        if hidden
        else (SafeString(c) if keep else conditional_escape(c))
        for c, hidden in present.reveal_segments(text)
    )
    return format_html_join("", "{}", ((part,) for part in parts))


@register.filter
def foretells_refusal(would_fail: JSONValue) -> bool:
    """Return whether the dry run's `would_fail` value, read from the database, predicts a refusal."""
    return present.foretells_refusal(would_fail)


@register.filter
def reveal_plain(value: JSONValue) -> str:
    """Return `value` with hidden characters spelled out as text, for attributes (autoescaped as usual)."""
    return present.reveal_plain("" if value is None else str(value))
