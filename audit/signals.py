"""What the audit log tells apps built above it, without importing them."""

from django.dispatch import Signal

# Sent with `event=` once the transaction that recorded it has committed (never for
# one rolled back). The chain is the outbox: a receiver that must not miss an event
# (a notification) also reads the events after the last one it handled, so a crash
# between the commit and this signal loses nothing. Receivers run in the committing
# request: keep them to a queued task.
event_recorded = Signal()
