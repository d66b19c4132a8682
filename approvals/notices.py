"""Telling whoever waits on a call (`?wait`) that it changed: a status published on the call's Redis channel.

Published only after the change commits (`approvals.lifecycle`), so a waiter told a
status finds the row there or further on. Without Redis (the embedded demo) nobody
is told, and waiters poll (`approvals.watch`).
"""

from __future__ import annotations

import logging
import uuid
from functools import lru_cache

import redis
from django.conf import settings

log = logging.getLogger(__name__)


def channel(call_id: uuid.UUID | str) -> str:
    return f"gatehouse:call:{call_id}"


@lru_cache(maxsize=4)
def client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=0.25)


def announce(call_id: uuid.UUID | str, status: str) -> None:
    """Tell whoever waits on the call that it is now in `status` (call after the change commits)."""
    if not settings.GATEHOUSE_REDIS_URL:
        return
    try:
        client(settings.GATEHOUSE_REDIS_URL).publish(channel(call_id), status)
    except redis.RedisError as exc:  # waiters still read the row every SAFETY_POLL
        log.warning("cannot announce a change of call %s: %s", call_id, exc)
