"""The bare composite's notice: the worker publishes on a row's channel once it has marked it done."""

from __future__ import annotations

import functools

import redis
from django.conf import settings


@functools.cache
def redis_client() -> redis.Redis:
    """Return this process's Redis client (the broker's server; connections pooled)."""
    return redis.Redis.from_url(settings.CELERY_BROKER_URL)


def done_channel(row_id: int) -> str:
    return f"bench-bare-done:{row_id}"
