"""The hook into every committed audit event: ask a worker to route it.

Runs in the request that committed the event, so it does no database work at all: for
an event that may be a notification it asks for a routing run (`route_new_events` reads
the chain itself), for any other nothing. It never raises into the caller; a request
lost to a broker outage is made up by beat's next sweep, which routes whatever is new.

Requests are coalesced: a run reads every event committed before it starts, so a burst
of held calls needs one run, not one each. A process sends at most one request at once
and one more, delayed to the end of the interval, for whatever commits in between.
"""

from __future__ import annotations

import logging
import threading
import time

from audit.models import Event
from notifications import outbox
from notifications.routing import event_type_of

log = logging.getLogger(__name__)

ROUTE_EVENTS = "notifications.tasks.route_events"
COALESCE_SECONDS = 0.5


class _Coalescer:
    """When this process last asked for a run at once, and until when a run it asked for covers new events."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last_immediate = -COALESCE_SECONDS
        self.covered_until = 0.0

    def countdown(self, now: float) -> float | None:
        """Return the delay of the run to ask for (0: at once), or None when one already asked for covers `now`."""
        with self.lock:
            if self.covered_until > now:
                return None
            if now - self.last_immediate >= COALESCE_SECONDS:
                self.last_immediate = self.covered_until = now
                return 0.0
            self.covered_until = self.last_immediate + COALESCE_SECONDS
            return self.covered_until - now


_coalescer = _Coalescer()


def on_event_recorded(sender: type, *, event: Event, **kwargs: object) -> None:
    """Receive `audit.signals.event_recorded`: have a worker route the new events, if this one is notifiable."""
    try:
        if event_type_of(event) is None:  # most events (a claim, a result, a replay) cost nothing at all
            return
        delay = _coalescer.countdown(time.monotonic())
        if delay is not None:
            outbox.send_task(ROUTE_EVENTS, {}, countdown=delay or None)
    except Exception:  # a notification never fails the change it tells of: logged, not raised
        # Unsealed yet (no seq): named by its id.
        log.exception("notifications: event id %s (%s) not announced; the next sweep routes it", event.pk, event.action)
