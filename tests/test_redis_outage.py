"""A `?wait` whose Redis is gone polls the database instead, and says so (rate limits: tests/test_rate_limit.py)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import connection

from agents import redisclient
from approvals import lifecycle, metrics, notices, watch
from approvals.models import ToolCall
from tests.conftest import refund
from tests.processes import RedisServer

pytestmark = pytest.mark.django_db(transaction=True)


def reviewer() -> Any:
    user = get_user_model().objects.create_user("rita")
    user.user_permissions.add(Permission.objects.get(codename="review_toolcall"))
    return get_user_model().objects.get(pk=user.pk)  # fresh: permissions are cached per instance


def went_on_without_redis(use: str) -> float:
    """Return this process's count of one use going on without Redis, as /metrics gives it."""
    return metrics.registry().get_sample_value("gatehouse_redis_unavailable_total", {"use": use}) or 0.0


def test_a_waiter_without_its_redis_polls_the_database_sees_the_decision_and_says_so(
    agent_api: Any,
    private_redis: RedisServer,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings.GATEHOUSE_REDIS_URL = private_redis.url
    monkeypatch.setattr(watch, "OUTAGE", redisclient.Outage("wait", watch.OUTAGE.consequence))
    monkeypatch.setattr(notices, "OUTAGE", redisclient.Outage("announce", notices.OUTAGE.consequence))
    response = agent_api().propose(refund(35000, idempotency_key="wait-without-redis"))
    assert response.status_code == 202
    call = ToolCall.objects.get(pk=response.json()["id"])
    waits, announces = went_on_without_redis("wait"), went_on_without_redis("announce")
    private_redis.stop()
    seen: list[dict[str, Any]] = []

    def wait() -> None:
        try:
            seen.append(watch.wait_for(ToolCall.objects.get(pk=call.pk), 30.0, until_changed_from="pending_approval"))
        finally:
            connection.close()

    with caplog.at_level(logging.WARNING, logger="agents.redisclient"):
        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()
        waiter.join(0.5)
        assert waiter.is_alive()  # still waiting: nothing has changed
        decided = time.monotonic()
        assert lifecycle.reject(call, reviewer(), "Not this customer.")  # its announcement is lost
        waiter.join(10)

    assert not waiter.is_alive()
    assert seen[0]["status"] == "rejected"
    assert time.monotonic() - decided < watch.SAFETY_POLL + 1  # noticed by a read of the row
    assert went_on_without_redis("wait") == waits + 1
    assert went_on_without_redis("announce") == announces + 1
    said = [message for message in caplog.messages if message.startswith("Redis unavailable for")]
    assert [message.split(" (")[0] for message in said] == [
        "Redis unavailable for wait",
        "Redis unavailable for announce",
    ]
