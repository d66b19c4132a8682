"""Per-agent request rate limits, shared by every web process through Redis.

A fixed one-minute window per agent: simple to reason about, one round trip
(INCR + EXPIRE in a pipeline). Without Redis (the embedded demo) the count is
kept in this process. A limiter that cannot reach Redis lets requests through:
an outage of the limiter must not become an outage of the API.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from functools import lru_cache

import redis
from django.conf import settings

log = logging.getLogger(__name__)
WINDOW_SECONDS = 60


@dataclass(frozen=True)
class RateDecision:
    allowed: bool
    retry_after: int = 0


def _window(now: float) -> tuple[int, int]:
    start = int(now) // WINDOW_SECONDS * WINDOW_SECONDS
    return start, start + WINDOW_SECONDS - int(now)


@lru_cache(maxsize=4)
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=0.25, socket_connect_timeout=0.25)


_local_counts: dict[tuple[int, int], int] = {}
_local_lock = threading.Lock()


def _count_locally(agent_id: int, window: int) -> int:
    with _local_lock:
        for key in [k for k in _local_counts if k[1] < window]:
            del _local_counts[key]
        _local_counts[(agent_id, window)] = _local_counts.get((agent_id, window), 0) + 1
        return _local_counts[(agent_id, window)]


def _count_in_redis(url: str, agent_id: int, window: int) -> int | None:
    key = f"gatehouse:rate:{agent_id}:{window}"
    try:
        pipe = _client(url).pipeline()
        pipe.incr(key)
        pipe.expire(key, WINDOW_SECONDS + 5)
        count, _ = pipe.execute()
    except redis.RedisError:
        log.warning("rate limiter cannot reach Redis; letting the request through")
        return None
    return int(count)


def hit(agent_id: int) -> RateDecision:
    """Count one request of the agent; say whether it is within its per-minute limit."""
    limit = settings.GATEHOUSE_RATE_LIMIT_PER_MINUTE
    if not limit:
        return RateDecision(True)
    window, remaining = _window(time.time())
    url = settings.GATEHOUSE_REDIS_URL
    count = _count_in_redis(url, agent_id, window) if url else _count_locally(agent_id, window)
    if count is None or count <= limit:
        return RateDecision(True)
    return RateDecision(False, retry_after=max(1, remaining))
