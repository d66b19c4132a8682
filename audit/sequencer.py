"""The sequencer: committed events get their place in the chain in batches, off the request path.

Writers insert events unsealed and take no lock (audit/store.py). Sealing, as a
Certificate Transparency log integrates its queued entries, takes the committed
unsealed events in insertion order (id) and, in one transaction under the sealers'
own lock, gives each the next seq after the sealed head, the head's hash as its
`prev_hash` and its hash in the sealed form (audit/hashing.py), with one UPDATE.
An event's seq is therefore the order in which it was sealed, not inserted: an
event whose transaction commits late is sealed in a later batch.

`python manage.py audit_sequencer` runs `run` in as many processes (machines) as
wanted: one leads, by a session-level PostgreSQL advisory lock on a connection of
its own, and the others try again every `FOLLOWER_RETRY` seconds; the leader's
death ends its session and frees the lock for one of them. Leadership only spares
work: two sealers at once are still serialised by the sealers' lock, and the
UPDATE touches only events still unsealed, so none is sealed twice.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from django.db import DatabaseError, InterfaceError, connection, transaction
from django.utils import timezone

from audit import store
from audit.hashing import sealed_hash
from audit.store import Seal

log = logging.getLogger(__name__)

BATCH = 10_000
# How long the leader waits when nothing is left to seal, and a follower between tries
# to lead: together with a batch's own time, well within the one-second sealing bound.
IDLE_WAIT = 0.1
FOLLOWER_RETRY = 0.5
# After a database error: long enough not to spin, short enough to keep the bound once it is back.
ERROR_WAIT = 0.5


class SealRaced(DatabaseError):
    """Another sealer sealed some of a batch's events first: the batch is rolled back whole."""


def seal(limit: int = BATCH) -> int:
    """Seal up to `limit` committed unsealed events, in one transaction; return how many were sealed."""
    with transaction.atomic():
        store.lock_sealing()
        head_seq, head_hash = store.sealed_head()
        seals = []
        for event_id, digest in store.unsealed(limit):
            if digest is None:
                raise ValueError(f"audit event id {event_id} has no digest: it was not inserted by audit.store")
            head_seq, prev_hash = head_seq + 1, head_hash
            head_hash = sealed_hash(prev_hash, head_seq, digest)
            seals.append(Seal(event_id, head_seq, prev_hash, head_hash))
        written = store.write_seals(seals, timezone.now())
        if written != len(seals):
            raise SealRaced(f"sealed {written} of {len(seals)} events: another sealer took the others")
    return len(seals)


def seal_all(batch: int = BATCH, stop: threading.Event | None = None) -> int:
    """Seal batches until none is full (or `stop` is set); return how many events were sealed."""
    total = 0
    while stop is None or not stop.is_set():
        sealed = seal(batch)
        total += sealed
        if sealed < batch:
            break
    return total


def run(stop: threading.Event, batch: int = BATCH) -> None:
    """Seal as the leader until `stop` is set, or wait for the leadership while another process holds it."""
    with leadership() as lead:
        was_leading = False
        while not stop.is_set():
            leading = lead()
            if leading != was_leading:
                log.info("audit sequencer: %s", "leading: sealing" if leading else "following: another process seals")
                was_leading = leading
            if not leading:
                stop.wait(FOLLOWER_RETRY)
                continue
            try:
                # A read outside any transaction first: an idle sequencer takes no lock (on SQLite, no write lock).
                sealed = seal_all(batch, stop) if store.any_unsealed() else 0
            except (DatabaseError, InterfaceError):
                log.exception("audit sequencer: sealing failed; trying again in %s s", ERROR_WAIT)
                connection.close()
                stop.wait(ERROR_WAIT)
                continue
            if sealed == 0:
                stop.wait(IDLE_WAIT)


@contextmanager
def leadership() -> Iterator[_Leadership]:
    """Yield a callable that says whether this process leads (taking the lead when it is free)."""
    lead = _Leadership()
    try:
        yield lead
    finally:
        lead.close()


class _Leadership:
    """The leader's lock, on a PostgreSQL connection of its own kept open while leading.

    Not on Django's connection: a pooled connection may be handed back and another
    one taken, and a session-level lock must live exactly as long as this process.
    SQLite runs one sequencer (the demo's): it always leads.
    """

    def __init__(self) -> None:
        self.session: psycopg.Connection | None = None
        self.leading = connection.vendor != "postgresql"

    def __call__(self) -> bool:
        if connection.vendor != "postgresql":
            return True
        try:
            if self.session is None or self.session.closed:
                self.leading = False
                self.session = psycopg.connect(store.conninfo(), autocommit=True)
            if self.leading:  # the lock is held while the session lives: check it still does
                self.session.execute("SELECT 1")
            else:
                self.leading = store.try_lead(self.session)
        except psycopg.Error:
            log.warning("audit sequencer: the leader's lock connection failed; connecting again", exc_info=True)
            self.close()
        return self.leading

    def close(self) -> None:
        self.leading = connection.vendor != "postgresql"
        if self.session is not None:
            self.session.close()  # ends the session, and with it the lock
            self.session = None
