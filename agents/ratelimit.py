"""Per-agent request rate limits, shared by every web process through Redis.

A fixed one-minute window per agent: simple to reason about, one round trip
(INCR + EXPIRE in a pipeline). When Redis cannot be reached, or none is configured
(the embedded demo), requests are let through: an outage of the limiter must not
become an outage of the API. That is said, never hidden behind a count kept per
process (which would multiply the limit by the number of processes): a warning at
most once a minute, and every request let through in
`gatehouse_redis_unavailable_total{use="rate_limit"}`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis
from django.conf import settings

from agents import redisclient

WINDOW_SECONDS = 60
# A failed round trip makes the next requests skip Redis for this long: while it is down,
# each would otherwise wait for its own connection timeout.
RETRY_AFTER_FAILURE = 1.0
SOCKET_TIMEOUT = 0.25
OUTAGE = redisclient.Outage("rate_limit", "per-agent rate limits are not enforced; requests are let through")


@dataclass(frozen=True)
class RateDecision:
    allowed: bool
    retry_after: int = 0


def _window(now: float) -> tuple[int, int]:
    start = int(now) // WINDOW_SECONDS * WINDOW_SECONDS
    return start, start + WINDOW_SECONDS - int(now)


# When a round trip last failed (assigning a float is atomic: no lock needed).
_failed_at: float | None = None


def _count_in_redis(url: str, agent_id: int, window: int) -> int | None:
    """Count the request in Redis; return the window's count, or None if Redis could not be asked."""
    global _failed_at
    if _failed_at is not None and time.monotonic() - _failed_at < RETRY_AFTER_FAILURE:
        OUTAGE.noted("it failed less than a second ago")
        return None
    key = f"gatehouse:rate:{agent_id}:{window}"
    try:
        pipe = redisclient.client(url, timeout=SOCKET_TIMEOUT).pipeline()
        pipe.incr(key)
        pipe.expire(key, WINDOW_SECONDS + 5)
        count, _ = pipe.execute()
    except redis.RedisError as exc:
        _failed_at = time.monotonic()
        OUTAGE.noted(exc)
        return None
    _failed_at = None
    OUTAGE.recovered()
    return int(count)


def hit(agent_id: int) -> RateDecision:
    """Count one request of the agent; say whether it is within its per-minute limit."""
    limit = settings.GATEHOUSE_RATE_LIMIT_PER_MINUTE
    if not limit:
        return RateDecision(True)
    window, remaining = _window(time.time())
    url = settings.GATEHOUSE_REDIS_URL
    if not url:
        OUTAGE.noted("no GATEHOUSE_REDIS_URL")
        return RateDecision(True)
    count = _count_in_redis(url, agent_id, window)
    if count is None or count <= limit:
        return RateDecision(True)
    return RateDecision(False, retry_after=max(1, remaining))
