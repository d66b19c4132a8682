"""Waiting for a call to change (`?wait`): the waiting request is told, rather than polling.

Every audited change of a call publishes the call's id on a Redis channel once its
transaction commits (`ToolCall.audit`). A waiting request subscribes *before* it
reads the call, so a change that commits in between is either in what it reads or
in a message it will get. A lost message costs at most `SAFETY_POLL`: the waiter
reads the row again anyway. Without Redis (the embedded demo) it polls, starting short.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import TYPE_CHECKING

import redis
from django.conf import settings
from django.db import connection

from approvals.states import SETTLED_STATUSES, TERMINAL_STATUSES

if TYPE_CHECKING:
    from approvals.models import ToolCall

log = logging.getLogger(__name__)

# Re-read the row at least this often even when told nothing (a message lost with Redis).
SAFETY_POLL = 0.5
# Without notifications: an auto-approved call settles in tens of milliseconds, and a
# first sleep of 50 ms was once most of its end-to-end latency (docs/benchmarks.md).
FIRST_POLL = 0.005


def channel(call_id: uuid.UUID | str) -> str:
    return f"gatehouse:call:{call_id}"


@lru_cache(maxsize=4)
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=0.25)


def announce(call_id: uuid.UUID | str, status: str) -> None:
    """Tell whoever waits on the call that it is now in `status` (call after the change commits)."""
    url = settings.GATEHOUSE_REDIS_URL
    if not url:
        return
    try:
        _client(url).publish(channel(call_id), status)
    except redis.RedisError as exc:  # waiters still read the row every SAFETY_POLL
        log.warning("cannot announce a change of call %s: %s", call_id, exc)


# What a change notice says: the status the call moved to, or None for "look".
NextChange = Callable[[float], str | None]


def _sleeping() -> NextChange:
    interval = FIRST_POLL

    def sleep(most: float) -> None:
        nonlocal interval
        time.sleep(min(interval, most))
        interval = min(interval * 1.3, SAFETY_POLL)

    return sleep


@contextmanager
def _changes(call_id: uuid.UUID) -> Iterator[NextChange]:
    """Yield a function that waits at most the given seconds for a change, and returns its status if told."""
    url = settings.GATEHOUSE_REDIS_URL
    if not url:
        yield _sleeping()
        return
    pubsub = _client(url).pubsub()
    try:
        pubsub.subscribe(channel(call_id))
        # The server has subscribed us once it confirms: only then may the row be read.
        pubsub.get_message(timeout=SAFETY_POLL)
    except redis.RedisError as exc:
        log.warning("cannot subscribe to changes of call %s (%s); polling", call_id, exc)
        pubsub.close()
        yield _sleeping()
        return

    def next_change(most: float) -> str | None:
        try:
            message = pubsub.get_message(ignore_subscribe_messages=True, timeout=min(most, SAFETY_POLL))
        except redis.RedisError:
            time.sleep(min(most, SAFETY_POLL))
            return None
        return message["data"].decode() if message else None

    try:
        yield next_change
    finally:
        pubsub.close()


def wait_for(call: ToolCall, seconds: float, *, until_changed_from: str | None = None) -> ToolCall:
    """Return the call once it settles (or leaves `until_changed_from`), or after at most `seconds`."""
    deadline = time.monotonic() + min(seconds, settings.GATEHOUSE_MAX_WAIT_SECONDS)

    def ends_wait(status: str) -> bool:
        return status in TERMINAL_STATUSES or (status in SETTLED_STATUSES and status != until_changed_from)

    if ends_wait(call.status):
        return call
    with _changes(call.pk) as next_change:
        call.refresh_from_db()
        while not ends_wait(call.status) and (remaining := deadline - time.monotonic()) > 0:
            if not connection.in_atomic_block:
                connection.close()  # give the connection back to the pool while we wait
            told = next_change(remaining)
            if told is None or ends_wait(told):  # steps in between (executing, executed) need no read
                call.refresh_from_db()
    return call
