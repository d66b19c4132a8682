"""The box office: search seats, hold them for ten minutes, release a hold.

Holds on one event are decided under a row lock on the event, so two fans never
hold the same seat; a repeat of an idempotency key returns the same hold.
"""

from __future__ import annotations

import secrets
from collections import defaultdict, namedtuple
from collections.abc import Iterable
from decimal import Decimal
from functools import cache

from django.db import connection, transaction
from django.utils import timezone

from audit.typealiases import JSONObject
from demo.common import ServiceError, brl, conflict_if_different, int_arg, request_hash, text_arg
from demo.models import HOLD_TTL, Event, Hold, Seat
from demo.verifier import Claims

MAX_OPTIONS = 5
# What a search reads of a seat.
SeatRow = namedtuple("SeatRow", ["seat_id", "section", "row", "number", "price_centavos"])
MAX_SEATS = 6


def _event(event_id: str, *, lock: bool = False) -> Event:
    queryset = Event.objects.select_for_update() if lock else Event.objects
    event = queryset.filter(event_id=event_id).first()
    if event is None:
        raise ServiceError(404, "event_not_found", f"There is no event {event_id}.")
    return event


def _held_seat_pks(event: Event) -> set[int]:
    return set(Seat.objects.filter(event=event, holds__in=Hold.objects.active()).values_list("pk", flat=True))


def _free_seats(event: Event, max_centavos: int) -> list[SeatRow]:
    """Return the event's seats at or under the price that no active hold keeps, by row and number.

    One statement built once, as plain rows: a search reads every seat of the event,
    and building the ORM query and a model instance per seat would be most of its work.
    """
    with connection.cursor() as cursor:
        now = connection.ops.adapt_datetimefield_value(timezone.now())  # as the ORM binds it (SQLite: text)
        cursor.execute(_free_seats_sql(), [event.pk, max_centavos, now])
        return [SeatRow(*row) for row in cursor.fetchall()]


@cache
def _free_seats_sql() -> str:
    seat, hold = Seat._meta.db_table, Hold._meta.db_table
    holds_seats = Hold.seats.through._meta.db_table
    return (
        f"SELECT s.seat_id, s.section, s.row, s.number, s.price_centavos FROM {seat} s "  # noqa: S608 — names from _meta
        "WHERE s.event_id = %s AND s.price_centavos <= %s AND NOT EXISTS ("
        f"SELECT 1 FROM {holds_seats} hs JOIN {hold} h ON h.id = hs.hold_id "
        "WHERE hs.seat_id = s.id AND h.released_at IS NULL AND h.expires_at > %s) "
        "ORDER BY s.row, s.number"
    )


def _runs(seats: list[SeatRow], quantity: int) -> Iterable[list[SeatRow]]:
    """Yield runs of `quantity` side-by-side seats in one row (seats sorted by number)."""
    for start in range(len(seats) - quantity + 1):
        run = seats[start : start + quantity]
        if run[-1].number - run[0].number == quantity - 1:
            yield run


def search_seats(arguments: JSONObject, *, key: str = "", claims: Claims | None = None) -> JSONObject:
    """Return at most five options of `quantity` adjacent available seats at or under the price limit."""
    event = _event(text_arg(arguments, "event_id"))
    quantity = int_arg(arguments, "quantity", 1, MAX_SEATS)
    limit = arguments.get("max_price_brl")
    if isinstance(limit, bool) or not isinstance(limit, int | float) or limit <= 0:
        raise ServiceError(422, "invalid_arguments", "max_price_brl must be a positive number.")
    max_centavos = int(Decimal(str(limit)) * 100)
    rows: dict[tuple[str, str], list[SeatRow]] = defaultdict(list)
    for seat in _free_seats(event, max_centavos):
        rows[(seat.section, seat.row)].append(seat)
    options = [run for seats in rows.values() for run in list(_runs(seats, quantity))[:1]]
    options.sort(key=lambda run: (sum(s.price_centavos for s in run), run[0].row))
    return {
        "event_id": event.event_id,
        "event": event.name,
        "starts_at": event.starts_at.isoformat(),
        "options": [_option(run) for run in options[:MAX_OPTIONS]],
    }


def _option(run: list[SeatRow]) -> JSONObject:
    total = sum(seat.price_centavos for seat in run)
    return {
        "seat_ids": [seat.seat_id for seat in run],
        "section": run[0].section,
        "row": run[0].row,
        "price_brl": run[0].price_centavos / 100,
        "total_brl": total / 100,
    }


def _hold_arguments(arguments: JSONObject) -> tuple[str, list[str]]:
    event_id = text_arg(arguments, "event_id")
    seat_ids = arguments.get("seat_ids")
    if (
        not isinstance(seat_ids, list)
        or not 1 <= len(seat_ids) <= MAX_SEATS
        or len(set(map(str, seat_ids))) != len(seat_ids)
    ):
        raise ServiceError(422, "invalid_arguments", f"seat_ids must list 1 to {MAX_SEATS} distinct seats.")
    return event_id, [str(seat_id) for seat_id in seat_ids]


def _seats(event: Event, seat_ids: list[str]) -> list[Seat]:
    seats = list(event.seats.filter(seat_id__in=seat_ids))
    unknown = sorted(set(seat_ids) - {seat.seat_id for seat in seats})
    if unknown:
        raise ServiceError(404, "seat_not_found", f"No such seats at {event.event_id}: {', '.join(unknown)}.")
    return seats


def _hold_body(hold: Hold, *, replayed: bool) -> JSONObject:
    return {
        "hold_id": hold.hold_id,
        "event_id": hold.event.event_id,
        "seat_ids": hold.seat_ids(),
        "expires_at": hold.expires_at.isoformat(),
        "total_brl": hold.total_centavos / 100,
        "replayed": replayed,
    }


@transaction.atomic
def hold_seats(arguments: JSONObject, *, key: str, claims: Claims) -> JSONObject:
    """Hold the seats for ten minutes, once per idempotency key; return the hold."""
    event_id, seat_ids = _hold_arguments(arguments)
    event = _event(event_id, lock=True)
    existing = Hold.objects.filter(idempotency_key=key).first()
    if existing is not None:
        conflict_if_different(existing.request_hash, arguments)
        return _hold_body(existing, replayed=True)
    seats = _seats(event, seat_ids)
    taken = sorted(seat.seat_id for seat in seats if seat.pk in _held_seat_pks(event))
    if taken:
        raise ServiceError(409, "seats_unavailable", f"Already held: {', '.join(taken)}.", seat_ids=taken)
    now = timezone.now()
    hold = Hold.objects.create(
        hold_id="h_" + secrets.token_hex(4),
        event=event,
        total_centavos=sum(seat.price_centavos for seat in seats),
        idempotency_key=key,
        request_hash=request_hash(arguments),
        call_id=claims.call_id,
        created_at=now,
        expires_at=now + HOLD_TTL,
    )
    hold.seats.set(seats)
    return _hold_body(hold, replayed=False)


def preview_hold(arguments: JSONObject) -> JSONObject:
    """Predict a hold: each seat's state before and after, or why it would be refused."""
    event_id, seat_ids = _hold_arguments(arguments)
    event = _event(event_id)
    seats = _seats(event, seat_ids)
    held = _held_seat_pks(event)
    before = {seat.seat_id: "held" if seat.pk in held else "available" for seat in seats}
    total = sum(seat.price_centavos for seat in seats)
    taken = sorted(seat_id for seat_id, state in before.items() if state == "held")
    if taken:
        return {
            "summary": f"Would be refused: already held: {', '.join(taken)}.",
            "before": before,
            "after": None,
            "would_fail": "seats_unavailable",
        }
    return {
        "summary": f"Hold {len(seats)} seat(s) at {event.name} for 10 minutes: {brl(total)}.",
        "before": before,
        "after": dict.fromkeys(before, "held for 10 minutes"),
    }


def verify_hold(arguments: JSONObject, result: JSONObject, *, key: str) -> JSONObject:
    """Read the hold back: does one exist for this key, on these seats?"""
    _, seat_ids = _hold_arguments(arguments)
    hold = Hold.objects.select_related("event").filter(idempotency_key=key).first()
    if hold is None:
        return {"confirmed": False, "observed": {"hold": None}, "detail": "No hold for this key."}
    observed = {"hold_id": hold.hold_id, "seat_ids": hold.seat_ids(), "state": hold.state}
    matches = observed["seat_ids"] == sorted(seat_ids) and hold.hold_id == result.get("hold_id")
    return {"confirmed": matches, "observed": observed, "detail": "" if matches else "The hold differs."}


def _hold(hold_id: str, *, lock: bool = False) -> Hold:
    queryset = Hold.objects.select_for_update() if lock else Hold.objects
    hold = queryset.select_related("event").filter(hold_id=hold_id).first()
    if hold is None:
        raise ServiceError(404, "hold_not_found", f"There is no hold {hold_id}.")
    return hold


@transaction.atomic
def release_hold(arguments: JSONObject, *, key: str, claims: Claims) -> JSONObject:
    """Release a hold (harmless if already released or expired); return its final state."""
    hold = _hold(text_arg(arguments, "hold_id"), lock=True)
    state_before = hold.state
    if hold.released_at is None:
        hold.released_at = timezone.now()
        hold.save(update_fields=["released_at"])
    return {"hold_id": hold.hold_id, "state_before": state_before, "state": "released", "seat_ids": hold.seat_ids()}


def preview_release(arguments: JSONObject) -> JSONObject:
    """Predict a release: the hold's state before and after."""
    hold = _hold(text_arg(arguments, "hold_id"))
    before = {"hold_id": hold.hold_id, "state": hold.state, "seat_ids": hold.seat_ids()}
    return {
        "summary": f"Release {hold.hold_id} ({', '.join(before['seat_ids'])}); it is {hold.state} now.",
        "before": before,
        "after": {**before, "state": "released"},
    }


def verify_release(arguments: JSONObject, result: JSONObject, *, key: str) -> JSONObject:
    """Read the hold back: is it released?"""
    hold = _hold(text_arg(arguments, "hold_id"))
    released = hold.released_at is not None
    return {"confirmed": released, "observed": {"hold_id": hold.hold_id, "state": hold.state}, "detail": ""}
