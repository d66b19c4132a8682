"""Gatehouse's own Redis (rate limits, waiters, notices): a client for a URL, and saying when Redis is out of reach.

A URL is a plain Redis one (`redis://`, `rediss://`, `unix://`) or a Redis Sentinel one,
written as kombu takes it for the broker: `sentinel://[:password@]host:port[/db]`, more
sentinels after `;` (`sentinel://s1:26379/0;sentinel://s2:26379`). The master's name is
`GATEHOUSE_REDIS_SENTINEL_MASTER`; the password and database of the first entry are the
master's. A Sentinel client asks the sentinels for the master on every new connection, so
it follows a failover without a restart.

What cannot reach Redis lets the work through (a rate limit is not counted, a waiter
polls the database) and says so: a warning at most once a minute per use, and every
occurrence in `gatehouse_redis_unavailable_total{use}` (`approvals.metrics`).
"""

from __future__ import annotations

import logging
import threading
import time
from functools import lru_cache
from urllib.parse import unquote, urlsplit

import redis
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from prometheus_client import Counter
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 0.25
# Once more at once (a pooled connection that died with a restarted server), then give up: redis-py's
# default (ten retries, backing off up to a second each) would hold a request for seconds while Redis is down.
RETRIES = 1
# A warning per use at most this often: an outage under load must not become a log flood.
WARNING_INTERVAL = 60.0
# Not in the default registry: `approvals.metrics` answers the scrape with it.
UNAVAILABLE = Counter(
    "gatehouse_redis_unavailable",
    "Times Gatehouse went on without Redis: a request not rate limited, a waiter polling, a change not announced.",
    ["use"],
    registry=None,
)


def is_sentinel(url: str) -> bool:
    """Return whether `url` names Redis Sentinels rather than a Redis server."""
    return url.startswith("sentinel://")


def sentinel_addresses(url: str) -> list[tuple[str, int]]:
    """Return (host, port) of each sentinel a `sentinel://…;sentinel://…` URL names."""
    addresses = []
    for part in url.split(";"):
        parts = urlsplit(part.strip())
        if parts.scheme != "sentinel" or not parts.hostname:
            raise ImproperlyConfigured(f"{part!r} is not sentinel://host:port")
        addresses.append((parts.hostname, parts.port or 26379))
    return addresses


def client(url: str, *, timeout: float) -> redis.Redis:
    """Return a client of the Redis `url` names (the current master, for a Sentinel URL); one per URL and timeout."""
    return _client(url, settings.GATEHOUSE_REDIS_SENTINEL_MASTER if is_sentinel(url) else "", timeout)


@lru_cache(maxsize=8)
def _client(url: str, master: str, timeout: float) -> redis.Redis:
    options = {"socket_timeout": timeout, "socket_connect_timeout": CONNECT_TIMEOUT}
    if not master:
        return redis.Redis.from_url(url, retry=Retry(NoBackoff(), RETRIES), **options)
    first = urlsplit(url.split(";")[0].strip())
    database = int(first.path.strip("/") or 0)
    password = unquote(first.password) if first.password else None
    # A sentinel that does not answer is skipped at once for the next one.
    asked = {**options, "retry": Retry(NoBackoff(), 0)}
    sentinels = Sentinel(sentinel_addresses(url), sentinel_kwargs=asked)  # type: ignore[no-untyped-call]
    master_client: redis.Redis = sentinels.master_for(  # type: ignore[no-untyped-call]
        master, db=database, password=password, retry=Retry(NoBackoff(), RETRIES), **options
    )
    return master_client


class Outage:
    """One use of Redis going on without it: counted every time, said at most once per WARNING_INTERVAL."""

    def __init__(self, use: str, consequence: str) -> None:
        self.use, self.consequence = use, consequence
        self._lock = threading.Lock()
        self._said_at: float | None = None

    def noted(self, reason: object) -> None:
        """Count one occurrence; log a warning if none was logged within the interval."""
        UNAVAILABLE.labels(use=self.use).inc()
        now = time.monotonic()
        with self._lock:
            if self._said_at is not None and now - self._said_at < WARNING_INTERVAL:
                return
            self._said_at = now
        log.warning("Redis unavailable for %s (%s): %s", self.use, reason, self.consequence)

    def recovered(self) -> None:
        """Note that Redis answered: say so if an outage was said, and say the next one at once."""
        if self._said_at is None:  # the usual case, without taking the lock
            return
        with self._lock:
            said, self._said_at = self._said_at, None
        if said is not None:
            log.warning("Redis reachable again for %s", self.use)
