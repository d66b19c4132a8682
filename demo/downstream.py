"""Demo downstream data (orders, events, seats)."""

from __future__ import annotations


def seed() -> None:
    """Create the demo orders and seats (idempotent)."""
