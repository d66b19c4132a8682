"""Waiting for a call to change (`?wait`): the waiting request is told, rather than polling.

Every audited change of a call into a status that can end a wait (settled) publishes
that status on the call's Redis channel once its transaction commits
(`ToolCall.audit`). A waiting request subscribes *before* it reads the call, so a
change that commits in between is either in what it reads or in a message it will
get. A lost message costs at most `SAFETY_POLL`: the waiter reads the status again
anyway. A worker step that settles a call sends its API body as stored with the
status (`Notice`), and the waiter answers with it instead of reading the call.
Without Redis (the embedded demo) it polls, starting short."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import redis
from django.conf import settings
from django.db import connection
from redis.client import PubSub

from approvals.rows import status_of, with_tool_and_agent
from approvals.serializers import call_body
from approvals.states import SETTLED_STATUSES, TERMINAL_STATUSES

if TYPE_CHECKING:
    from approvals.models import ToolCall

log = logging.getLogger(__name__)

# Re-read the row at least this often even when told nothing (a message lost with Redis).
SAFETY_POLL = 0.5
# Without notifications: an auto-approved call settles in tens of milliseconds, so a
# first sleep of the same order would add about as much again to the wait.
FIRST_POLL = 0.005


def channel(call_id: uuid.UUID | str) -> str:
    return f"gatehouse:call:{call_id}"


@lru_cache(maxsize=4)
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=0.25)


def can_tell() -> bool:
    """Return whether waiters are told of changes (Redis); without it they poll, and a notice goes nowhere."""
    return bool(settings.GATEHOUSE_REDIS_URL)


def announce(call_id: uuid.UUID | str, status: str, body: dict[str, Any] | None = None) -> None:
    """Tell whoever waits on the call that it is now in `status` (call after the change commits).

    `body`: the call's API body as committed (built from the row the change returned),
    when the announcer has it: a waiter then answers with it and reads nothing.
    """
    if not can_tell():
        return
    # The standard library's json, not orjson: a result may hold integers beyond 64 bits.
    message = status if body is None else json.dumps({"status": status, "call": body}, ensure_ascii=False)
    try:
        _client(settings.GATEHOUSE_REDIS_URL).publish(channel(call_id), message)
    except redis.RedisError as exc:  # waiters still read the row every SAFETY_POLL
        log.warning("cannot announce a change of call %s: %s", call_id, exc)


@dataclass(frozen=True)
class Notice:
    """A change notice: the status the call moved to and, if the announcer had it, its body as committed."""

    status: str
    body: dict[str, Any] | None = None

    @classmethod
    def parse(cls, data: bytes) -> Notice:
        if not data.startswith(b"{"):
            return cls(data.decode())
        told = json.loads(data)
        return cls(told["status"], told["call"])


# Waits at most the given seconds for a change notice; None for "look".
NextChange = Callable[[float], Notice | None]


def _sleeping() -> NextChange:
    interval = FIRST_POLL

    def sleep(most: float) -> None:
        nonlocal interval
        time.sleep(min(interval, most))
        interval = min(interval * 1.3, SAFETY_POLL)

    return sleep


# Subscribers kept open between waits, per Redis URL: a new one costs a connection
# (TCP and handshake) per waiting request.
_idle: dict[str, list[PubSub]] = {}
_idle_lock = threading.Lock()
IDLE_SUBSCRIBERS = 16


def _take_subscriber(url: str) -> PubSub:
    with _idle_lock:
        idle = _idle.get(url)
        if idle:
            return idle.pop()
    return _client(url).pubsub()


def _give_back(url: str, pubsub: PubSub, name: str) -> None:
    """Unsubscribe and keep the subscriber for the next wait (its confirmation is read then)."""
    try:
        pubsub.unsubscribe(name)
    except redis.RedisError:
        pubsub.close()
        return
    with _idle_lock:
        idle = _idle.setdefault(url, [])
        if len(idle) < IDLE_SUBSCRIBERS:
            idle.append(pubsub)
            return
    pubsub.close()


def _subscribe(pubsub: PubSub, name: str) -> None:
    """Subscribe to `name` and read up to the server's confirmation (skipping what an earlier wait left)."""
    pubsub.subscribe(name)
    deadline = time.monotonic() + SAFETY_POLL
    while (remaining := deadline - time.monotonic()) > 0:
        message = pubsub.get_message(timeout=remaining)
        if message and message["type"] == "subscribe" and message["channel"] == name.encode():
            return


@contextmanager
def _changes(call_id: uuid.UUID) -> Iterator[NextChange]:
    """Yield a function that waits at most the given seconds for a change, and returns its status if told."""
    url = settings.GATEHOUSE_REDIS_URL
    if not url:
        yield _sleeping()
        return
    name = channel(call_id)
    pubsub = _take_subscriber(url)
    try:
        # Once the server confirms, we are subscribed: only then may the row be read.
        _subscribe(pubsub, name)
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
        if message is None or message["channel"] != name.encode():  # nothing, or left by an earlier wait
            return None
        return Notice.parse(message["data"])

    try:
        yield next_change
    finally:
        _give_back(url, pubsub, name)


def wait_for(call: ToolCall, seconds: float, *, until_changed_from: str | None = None) -> dict[str, Any]:
    """Return the call's body once it settles (or leaves `until_changed_from`), or after at most `seconds`."""
    deadline = time.monotonic() + min(seconds, settings.GATEHOUSE_MAX_WAIT_SECONDS)

    def ends_wait(status: str) -> bool:
        return status in TERMINAL_STATUSES or (status in SETTLED_STATUSES and status != until_changed_from)

    if ends_wait(call.status):
        return call_body(call)
    with _changes(call.pk) as next_change:
        status = status_of(type(call), call.pk)
        while status is not None and not ends_wait(status) and (remaining := deadline - time.monotonic()) > 0:
            if not connection.in_atomic_block:
                connection.close()  # give the connection back to the pool while we wait
            told = next_change(remaining)
            if told is None:  # nothing said within SAFETY_POLL (or a lost message): look
                status = status_of(type(call), call.pk)
            elif ends_wait(told.status):  # published after its commit: the row is there, or further on
                if told.body is not None:
                    return told.body  # the row as that commit left it: nothing to read
                status = told.status
            # a status that does not end this wait needs no read
    fresh = with_tool_and_agent(type(call), call.pk)  # once, for the answer
    if fresh is None:
        raise type(call).DoesNotExist(f"call {call.pk} no longer exists")
    return call_body(fresh)
