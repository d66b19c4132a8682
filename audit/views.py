"""The audit log browser: filters and search, keyset pages, streamed CSV / JSON Lines export, chain status.

The pages are guarded by audit's own permission (`audit.browse_auditlog`), so who may
read the log is decided apart from who may decide calls. Pages use keyset pagination
on `seq` (no COUNT, no OFFSET), so the first and the ten-thousandth page cost the same.
Events waiting to be sealed have no seq yet: the first page shows them above the
sealed ones, newest insert first, marked as waiting, with how many wait.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, time, timedelta
from functools import reduce
from operator import or_
from typing import ParamSpec
from urllib.parse import urlencode

from django import forms
from django.contrib.auth.decorators import login_required, permission_required
from django.core.cache import cache
from django.core.serializers.json import DjangoJSONEncoder
from django.core.validators import MaxValueValidator
from django.db.models import Q, QuerySet
from django.http import HttpResponse, HttpResponseBadRequest, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from audit.chain import first_break
from audit.http import ConsoleRequest
from audit.models import HASHED_FIELDS, Event
from audit.search import call_id_lookups, json_contains
from audit.store import unsealed_count
from audit.typealiases import JSONValue

BROWSE_PERMISSION = "audit.browse_auditlog"
PAGE_SIZE = 100
EXPORT_BATCH = 2000
CHAIN_CACHE_KEY = "audit:chain-status"
CHAIN_CACHE_SECONDS = 120
EXPORT_FIELDS = (*HASHED_FIELDS, "digest", "prev_hash", "hash")
# An event is stamped just before its INSERT takes its id: created_at and id grow together but for
# writers racing in between; a date filter's id bounds leave this much room for them.
STAMP_MARGIN = timedelta(minutes=5)
# The keyset position after a first page filled with waiting events: the sealed chain from its top.
ABOVE_EVERY_SEQ = 2**62
# A spreadsheet would run a cell starting with these as a formula; agents choose some of this text.
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
# A call's arguments are recorded once, in its proposal's event.
PROPOSED_ACTION = "call.proposed"
# The filters (the keyset position `before` only moves through the results).
FILTERS = ("q", "agent", "tool", "action", "call", "date_from", "date_to")


class EventFilterForm(forms.Form):
    """The audit log's query string: filters, free-text search and page position, each value validated."""

    q = forms.CharField(
        required=False,
        max_length=200,
        label="Search",
        widget=forms.TextInput(attrs={"type": "search", "placeholder": "PED-00000001, agent, call id…"}),
    )
    agent = forms.CharField(required=False, max_length=150)
    tool = forms.CharField(required=False, max_length=100)
    action = forms.CharField(required=False, max_length=64)
    call = forms.UUIDField(required=False, label="Call id")
    date_from = forms.DateField(required=False, label="From", widget=forms.DateInput(attrs={"type": "date"}))
    date_to = forms.DateField(required=False, label="To", widget=forms.DateInput(attrs={"type": "date"}))
    before = forms.IntegerField(
        required=False, min_value=1, validators=[MaxValueValidator(2**63 - 1)], widget=forms.HiddenInput
    )

    def filter_query(self) -> str:
        """Return the valid filters as a query string (no `before`): what polls, pages and exports keep."""
        self.is_valid()
        data = getattr(self, "cleaned_data", {})
        return urlencode({name: self.data[name] for name in FILTERS if data.get(name) not in (None, "")})


def _day_start(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=UTC)


def _day_end(day: date) -> datetime | None:
    """Return when `day` ends (UTC), or None for the calendar's last day (nothing comes after it)."""
    return _day_start(day + timedelta(days=1)) if day < date.max else None


def filtered_events(form: EventFilterForm) -> QuerySet[Event]:
    """Return the events matching the form's valid filters (exact matches on indexed columns) and search."""
    form.is_valid()
    data = getattr(form, "cleaned_data", {})
    lookups = {
        "agent_name": data.get("agent"),
        "tool_name": data.get("tool"),
        "action": data.get("action"),
        "call_id": data.get("call"),
        "created_at__gte": _day_start(data["date_from"]) if data.get("date_from") else None,
        "created_at__lt": _day_end(data["date_to"]) if data.get("date_to") else None,
    }
    events = Event.objects.filter(**{key: value for key, value in lookups.items() if value})
    events = matching(events, data.get("q") or "")
    return events.filter(**_id_bounds(lookups["created_at__gte"], lookups["created_at__lt"]))


def matching(events: QuerySet[Event], text: str) -> QuerySet[Event]:
    """Return the events whose names or data contain `text`, or whose call's arguments do (any case)."""
    if not text:
        return events
    about = Event.objects.filter(json_contains("data", text), action=PROPOSED_ACTION, call_id__isnull=False)
    wanted = [
        *(Q(**{f"{name}__icontains": text}) for name in ("agent_name", "actor_name", "tool_name", "action")),
        json_contains("data", text),
        Q(call_id__in=about.values("call_id")),
        *call_id_lookups("call_id", text),
    ]
    return events.filter(reduce(or_, wanted))


def _id_bounds(start: datetime | None, end: datetime | None) -> dict[str, int]:
    """Return an id range that holds every event of a date range, so date filters read a range, not the whole log.

    Not seq: an event is sealed after it commits, however late. Its id is drawn at
    insert, just after it is stamped, so an event stamped `STAMP_MARGIN` before the
    range has a smaller id than any event in it, and one stamped that long after, a
    larger one. The date filters stay applied as well: the bounds only narrow what is read.
    """
    bounds = {}
    before = _moved(start, -STAMP_MARGIN)
    if before is not None:
        earlier = Event.objects.filter(created_at__lt=before).order_by("-created_at")
        bounds["id__gt"] = earlier.values_list("id", flat=True).first() or 0
    after = _moved(end, STAMP_MARGIN)
    if after is not None:
        later = Event.objects.filter(created_at__gte=after).order_by("created_at")
        bounds["id__lt"] = later.values_list("id", flat=True).first() or 2**62
    return bounds


def _moved(moment: datetime | None, by: timedelta) -> datetime | None:
    """Return `moment` moved `by`, or None when there is no moment or it would leave the calendar (no bound)."""
    try:
        return moment + by if moment is not None else None
    except OverflowError:
        return None


Params = ParamSpec("Params")


def auditors_only(view: Callable[Params, HttpResponseBase]) -> Callable[Params, HttpResponseBase]:
    """Signed-in people who may browse the audit log only; others signed in get 403."""
    return login_required(permission_required(BROWSE_PERMISSION, raise_exception=True)(view))


@require_GET
@vary_on_headers("HX-Request")
@auditors_only
def event_log(request: ConsoleRequest) -> HttpResponse:
    """Audit events newest first, 100 a page, those waiting to be sealed first; htmx polls get just the table."""
    form = EventFilterForm(request.GET)
    events = filtered_events(form)
    before = form.cleaned_data.get("before")
    page = [] if before is not None else list(events.filter(seq__isnull=True).order_by("-id")[: PAGE_SIZE + 1])
    sealed = events.filter(seq__lt=before) if before is not None else events.filter(seq__isnull=False)
    page += sealed.order_by("-seq")[: PAGE_SIZE + 1 - len(page)] if len(page) <= PAGE_SIZE else []
    last_shown = page[PAGE_SIZE - 1] if len(page) > PAGE_SIZE else None
    context = {
        "form": form,
        "events": page[:PAGE_SIZE],
        "next_before": None if last_shown is None else last_shown.seq or ABOVE_EVERY_SEQ,
        "paged": before is not None,
        "filter_query": form.filter_query(),
        "waiting": unsealed_count(),
    }
    partial = request.htmx and not request.htmx.history_restore_request
    template = "audit/_event_rows.html" if partial else "audit/event_log.html"
    # An invalid value is not applied; the filter bar says which.
    return render(request, template, context, status=400 if form.errors else 200)


def iter_events(events: QuerySet[Event]) -> Iterator[Event]:
    """Yield sealed events in chain order, then those waiting to be sealed by insert, in keyset batches.

    Memory stays flat for a million rows.
    """
    yield from _keyset(events, "seq")
    yield from _keyset(events.filter(seq__isnull=True), "id")


def _keyset(events: QuerySet[Event], key: str) -> Iterator[Event]:
    last = 0
    while True:
        batch = list(events.filter(**{f"{key}__gt": last}).order_by(key)[:EXPORT_BATCH])
        if not batch:
            return
        yield from batch
        last = getattr(batch[-1], key)


def export_row(event: Event) -> dict[str, JSONValue]:
    """Return an event exactly as stored: what a verifier recomputes the hashes from."""
    return {name: getattr(event, name) for name in EXPORT_FIELDS}


def _safe_cell(value: JSONValue) -> JSONValue:
    text = value if isinstance(value, str) else None
    return "'" + text if text and text.startswith(FORMULA_PREFIXES) else value


class _Echo:
    """A file-like object whose write() returns the line, for streaming csv.writer output."""

    def write(self, value: str) -> str:
        return value


def _csv_lines(events: QuerySet[Event]) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(EXPORT_FIELDS)
    for event in iter_events(events):
        row = export_row(event)
        row["data"] = json.dumps(row["data"], ensure_ascii=False, sort_keys=True)
        yield writer.writerow([_safe_cell(value) if isinstance(value, str) else value for value in row.values()])


def _json_lines(events: QuerySet[Event]) -> Iterator[str]:
    for event in iter_events(events):
        yield json.dumps(export_row(event), cls=DjangoJSONEncoder, ensure_ascii=False) + "\n"


@require_GET
@auditors_only
def export(request: ConsoleRequest, fmt: str) -> StreamingHttpResponse | HttpResponse:
    """Stream the filtered events as CSV (for people; formula-like cells quoted) or JSON Lines (exact)."""
    form = EventFilterForm(request.GET)
    events = filtered_events(form)
    if form.errors:  # an export must hold what was asked for, not more
        return HttpResponseBadRequest(form.errors.as_text(), content_type="text/plain; charset=utf-8")
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    if fmt == "csv":
        response = StreamingHttpResponse(_csv_lines(events), content_type="text/csv; charset=utf-8")
    else:
        response = StreamingHttpResponse(_json_lines(events), content_type="application/x-ndjson; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="gatehouse-audit-{stamp}.{fmt}"'
    return response


def chain_status(fresh: bool = False) -> dict[str, JSONValue]:
    """Return whether the sealed hash chain verifies, re-walking it at most every two minutes unless `fresh`."""
    status = None if fresh else cache.get(CHAIN_CACHE_KEY)
    if status is None:
        head = Event.objects.filter(seq__isnull=False).order_by("-seq").values_list("seq", flat=True).first() or 0
        broken = first_break()
        status = {
            "intact": broken is None,
            "checked_at": timezone.now(),
            "events": head,
            "waiting": unsealed_count(),
            "break_seq": broken.seq if broken else None,
            "break_reason": broken.reason if broken else "",
        }
        cache.set(CHAIN_CACHE_KEY, status, CHAIN_CACHE_SECONDS)
    return status


@require_GET
@auditors_only
def chain(request: ConsoleRequest) -> HttpResponse:
    """The chain verification badge, loaded after the page so a long walk never delays it."""
    return render(request, "audit/_chain_status.html", {"chain": chain_status(fresh="fresh" in request.GET)})
