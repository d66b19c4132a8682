"""Demo downstream data: orders PED-00000001…, and two shows with priced seats.

The Saturday show answers seed 004's "two seats under R$ 300 for Saturday":
its lower tier costs R$ 280 and its upper tier R$ 150.
"""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

from django.db import transaction
from django.utils import timezone

from demo.models import Event, Order, Seat

ORDER_COUNT = 50
AMOUNTS = [8990, 15990, 24900, 35000, 49990, 89900, 129900, 250000, 650000, 1500000]
CUSTOMERS = ["Ana Souza", "Bruno Lima", "Carla Dias", "Diego Alves", "Elisa Rocha", "Felipe Nunes", "Gabi Torres"]
PRODUCTS = ["Fone Bluetooth", "Cafeteira", "Tênis de corrida", "Monitor 27”", "Cadeira gamer", "Notebook"]

# (section, rows, seats per row, price in cents)
SECTIONS = [
    ("Pista Premium", "AB", 10, 32000),
    ("Cadeira Inferior", "CDE", 12, 28000),
    ("Cadeira Superior", "FG", 14, 15000),
    ("Camarote", "K", 6, 65000),
]
EVENTS = [
    ("show-sabado", "Festival de Verão — sábado", 5),  # 5 = Saturday
    ("show-domingo", "Festival de Verão — domingo", 6),
]


def order_id(number: int) -> str:
    """Return the id of the demo order `number`: 1 → "PED-00000001"."""
    return f"PED-{number:08d}"


def next_weekday(weekday: int) -> datetime:
    """Return 20:00 (UTC) of the next given weekday (0 = Monday), at least a day away."""
    today = timezone.now().date()
    days = (weekday - today.weekday()) % 7 or 7
    return datetime.combine(today + timedelta(days=days), time(20, 0), tzinfo=UTC)


def seed_orders() -> None:
    """Create the demo orders that do not exist yet."""
    existing = set(Order.objects.values_list("order_id", flat=True))
    Order.objects.bulk_create(
        Order(
            order_id=order_id(n),
            customer=CUSTOMERS[n % len(CUSTOMERS)],
            description=PRODUCTS[n % len(PRODUCTS)],
            amount_centavos=AMOUNTS[(n - 1) % len(AMOUNTS)],
        )
        for n in range(1, ORDER_COUNT + 1)
        if order_id(n) not in existing
    )


def seed_event(event_id: str, name: str, weekday: int) -> Event:
    """Create an event and its seats if missing; return it."""
    event, _ = Event.objects.get_or_create(
        event_id=event_id,
        defaults={"name": name, "venue": "Arena Rio", "starts_at": next_weekday(weekday)},
    )
    existing = set(event.seats.values_list("seat_id", flat=True))
    Seat.objects.bulk_create(
        Seat(event=event, seat_id=f"{row}{n}", section=section, row=row, number=n, price_centavos=price)
        for section, rows, per_row, price in SECTIONS
        for row in rows
        for n in range(1, per_row + 1)
        if f"{row}{n}" not in existing
    )
    return event


@transaction.atomic
def seed() -> None:
    """Create the demo orders and seats (idempotent: existing rows are left as they are)."""
    seed_orders()
    for event_id, name, weekday in EVENTS:
        seed_event(event_id, name, weekday)
