"""Waiting for a call to change (`?wait`): the waiting request is told, rather than polling.

Every audited change of a call into a status that can end a wait (settled) publishes
that status on the call's Redis channel once its transaction commits
(`approvals.notices`). A waiting request subscribes *before* it reads the call, so a
change that commits in between is either in what it reads or in a message it will
get. A lost message costs at most `SAFETY_POLL`: the waiter reads the status again
anyway. Without Redis (the embedded demo) it polls the database, starting short. When
Redis cannot be reached, a waiter polls the database the same way (the wait still ends
on the change, at most SAFETY_POLL late), counted once per wait in
`gatehouse_redis_unavailable_total{use="wait"}` and said in a warning at most once a minute."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import redis
from django.conf import settings
from django.db import connection
from redis.client import PubSub

from agents import redisclient
from approvals.models import ToolCall
from approvals.notices import channel, client
from approvals.serializers import call_body
from approvals.states import SETTLED_STATUSES, TERMINAL_STATUSES
from audit.typealiases import JSONObject

OUTAGE = redisclient.Outage("wait", "waiters poll the database")

# Re-read the row at least this often even when told nothing (a message lost with Redis).
SAFETY_POLL = 0.5
# Without notifications: an auto-approved call settles in tens of milliseconds, so a
# first sleep of the same order would add about as much again to the wait.
FIRST_POLL = 0.005


# Waits at most the given seconds for a change; returns the status told, or None for "look".
NextChange = Callable[[float], str | None]


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
    # redis-py leaves pubsub() and unsubscribe() unannotated.
    pubsub: PubSub = client(url).pubsub()  # type: ignore[no-untyped-call]
    return pubsub


def _give_back(url: str, pubsub: PubSub, name: str) -> None:
    """Unsubscribe and keep the subscriber for the next wait (its confirmation is read then)."""
    try:
        pubsub.unsubscribe(name)  # type: ignore[no-untyped-call]
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
        OUTAGE.noted(exc)
        pubsub.close()
        yield _sleeping()
        return
    OUTAGE.recovered()
    lost = False

    def next_change(most: float) -> str | None:
        nonlocal lost
        try:
            message = pubsub.get_message(ignore_subscribe_messages=True, timeout=min(most, SAFETY_POLL))
        except redis.RedisError as exc:
            if not lost:  # once per wait: the rest of it polls
                lost = True
                OUTAGE.noted(exc)
            time.sleep(min(most, SAFETY_POLL))
            return None
        if message is None or message["channel"] != name.encode():  # nothing, or left by an earlier wait
            return None
        return bytes(message["data"]).decode()

    try:
        yield next_change
    finally:
        _give_back(url, pubsub, name)


def wait_for(call: ToolCall, seconds: float, *, until_changed_from: str | None = None) -> JSONObject:
    """Return the call's body once it settles (or leaves `until_changed_from`), or after at most `seconds`."""
    deadline = time.monotonic() + min(seconds, settings.GATEHOUSE_MAX_WAIT_SECONDS)

    def ends_wait(status: str | None) -> bool:
        return (
            status is None
            or status in TERMINAL_STATUSES
            or (status in SETTLED_STATUSES and status != until_changed_from)
        )

    if ends_wait(call.status):
        return call_body(call)
    with _changes(call.pk) as next_change:
        status = status_of(call.pk)
        while not ends_wait(status) and (remaining := deadline - time.monotonic()) > 0:
            if not connection.in_atomic_block:
                connection.close()  # give the connection back to the pool while we wait
            # Told a status (published after its commit): the row is there, or further on. Told nothing
            # within SAFETY_POLL (or a lost message): look.
            status = next_change(remaining) or status_of(call.pk)
    return call_body(ToolCall.objects.select_related("tool", "agent").get(pk=call.pk))  # once, for the answer


def status_of(call_id: uuid.UUID) -> str | None:
    """Return the call's current status, or None if it is gone."""
    return ToolCall.objects.filter(pk=call_id).values_list("status", flat=True).first()
