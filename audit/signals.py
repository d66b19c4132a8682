"""What the audit log tells apps built above it, without importing them."""

from django.dispatch import Signal

# Sent with `event=` inside the transaction that records it: a receiver that acts
# outside the database (a notification) defers with `transaction.on_commit`, so a
# rolled-back change tells nobody.
event_recorded = Signal()
