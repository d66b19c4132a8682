"""The hook into every committed audit event: ask a worker to route it.

Runs in the request that committed the event, so it does no database work at all: for
an event that may be a notification it sends one message (`route_new_events` reads the
chain itself), for any other nothing. It never raises into the caller; a message lost to
a broker outage is made up by beat's next sweep, which routes whatever is new.
"""

from __future__ import annotations

import logging

from audit.models import Event
from notifications import outbox
from notifications.routing import event_type_of

log = logging.getLogger(__name__)

ROUTE_EVENTS = "notifications.tasks.route_events"


def on_event_recorded(sender: type, *, event: Event, **kwargs: object) -> None:
    """Receive `audit.signals.event_recorded`: have a worker route the new events, if this one is notifiable."""
    try:
        if event_type_of(event) is not None:  # most events (a claim, a result, a replay) cost nothing at all
            outbox.send_task(ROUTE_EVENTS, {})
    except Exception:  # a notification never fails the change it tells of: logged, not raised
        log.exception("notifications: event #%s (%s) not announced; the next sweep routes it", event.seq, event.action)
