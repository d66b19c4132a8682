"""Telling whoever waits on a call (`?wait`) that it changed: a status published on the call's Redis channel.

Published only after the change commits (`approvals.lifecycle`), so a waiter told a
status finds the row there or further on. Without Redis (the embedded demo) nobody
is told, and waiters poll (`approvals.watch`); a change that cannot be announced
counts in `gatehouse_redis_unavailable_total{use="announce"}` (`agents.redisclient`).
"""

from __future__ import annotations

import uuid

import redis
from django.conf import settings

from agents import redisclient

SOCKET_TIMEOUT = 1.0
OUTAGE = redisclient.Outage("announce", "changes of calls are not announced; waiters read the database instead")


def channel(call_id: uuid.UUID | str) -> str:
    return f"gatehouse:call:{call_id}"


def client(url: str) -> redis.Redis:
    """Return the client of Gatehouse's Redis at `url` (a Sentinel URL: the current master)."""
    return redisclient.client(url, timeout=SOCKET_TIMEOUT)


def announce(call_id: uuid.UUID | str, status: str) -> None:
    """Tell whoever waits on the call that it is now in `status` (call after the change commits)."""
    if not settings.GATEHOUSE_REDIS_URL:
        return
    try:
        client(settings.GATEHOUSE_REDIS_URL).publish(channel(call_id), status)
    except redis.RedisError as exc:  # waiters still read the row every SAFETY_POLL
        OUTAGE.noted(exc)
        return
    OUTAGE.recovered()
