"""The demo downstream: an orders/refunds ledger and a box office with seat holds.

These tables belong to the sample services the demo tools act on, not to Gatehouse.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import models
from django.db.models import F, Q
from django.utils import timezone

HOLD_TTL = timedelta(minutes=10)


class Order(models.Model):
    """A customer's order; refunds never take more out of it than it cost."""

    order_id = models.CharField(max_length=12, unique=True)
    customer = models.CharField(max_length=100)
    description = models.CharField(max_length=200)
    amount_centavos = models.PositiveIntegerField()
    refunded_centavos = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=20, default="delivered")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["order_id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(refunded_centavos__lte=F("amount_centavos")), name="demo_order_refunds_within_amount"
            )
        ]

    def __str__(self) -> str:
        return self.order_id

    @property
    def refundable_centavos(self) -> int:
        return self.amount_centavos - self.refunded_centavos


class Refund(models.Model):
    """One refund in the ledger: exactly one per idempotency key."""

    refund_id = models.CharField(max_length=16, unique=True)
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="refunds")
    amount_centavos = models.PositiveIntegerField()
    motivo = models.CharField(max_length=40)
    idempotency_key = models.CharField(max_length=255, unique=True)
    request_hash = models.CharField(max_length=64)
    call_id = models.CharField(max_length=64, blank=True)
    approval_ref = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at"]

    def __str__(self) -> str:
        return f"{self.refund_id} {self.order.order_id} {self.amount_centavos}"


class Event(models.Model):
    """A show with numbered seats."""

    event_id = models.CharField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    venue = models.CharField(max_length=200)
    starts_at = models.DateTimeField()

    class Meta:
        ordering = ["starts_at"]

    def __str__(self) -> str:
        return self.event_id


class Seat(models.Model):
    event = models.ForeignKey(Event, on_delete=models.CASCADE, related_name="seats")
    seat_id = models.CharField(max_length=32)
    section = models.CharField(max_length=60)
    row = models.CharField(max_length=4)
    number = models.PositiveSmallIntegerField()
    price_centavos = models.PositiveIntegerField()

    class Meta:
        ordering = ["event", "row", "number"]
        constraints = [models.UniqueConstraint(fields=["event", "seat_id"], name="demo_seat_unique_per_event")]

    def __str__(self) -> str:
        return f"{self.event.event_id}/{self.seat_id}"


class HoldQuerySet(models.QuerySet["Hold"]):
    def active(self) -> HoldQuerySet:
        """Return holds neither released nor expired."""
        return self.filter(released_at__isnull=True, expires_at__gt=timezone.now())


class Hold(models.Model):
    """Seats kept for a fan for ten minutes; released by release_hold or by expiring."""

    hold_id = models.CharField(max_length=16, unique=True)
    event = models.ForeignKey(Event, on_delete=models.CASCADE, related_name="holds")
    seats = models.ManyToManyField(Seat, related_name="holds")
    total_centavos = models.PositiveIntegerField()
    idempotency_key = models.CharField(max_length=255, unique=True)
    request_hash = models.CharField(max_length=64)
    call_id = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    released_at = models.DateTimeField(null=True, blank=True)

    objects = HoldQuerySet.as_manager()

    class Meta:
        ordering = ["created_at"]

    def __str__(self) -> str:
        return self.hold_id

    @property
    def state(self) -> str:
        """Return "released", "expired" or "active"."""
        if self.released_at is not None:
            return "released"
        return "expired" if self.expires_at <= timezone.now() else "active"

    def seat_ids(self) -> list[str]:
        return sorted(seat.seat_id for seat in self.seats.all())


class SpentCredential(models.Model):
    """A credential's jti that took effect here: the same credential never takes effect twice.

    Shared by every process serving the demo; a row may be dropped once its credential
    has expired, since an expired credential is refused anyway.
    """

    jti = models.CharField(max_length=255, unique=True)
    expires_at = models.DateTimeField()
    spent_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.jti
