"""Per-agent rate limits are counted in Redis, so every web process shares them."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
import redis
from django.conf import settings

from agents import ratelimit
from tests.conftest import AgentApi, start_of_a_fresh_window

pytestmark = pytest.mark.django_db


@pytest.fixture
def limited(settings) -> Iterator[None]:
    settings.GATEHOUSE_RATE_LIMIT_PER_MINUTE = 5
    client = redis.Redis.from_url(settings.GATEHOUSE_REDIS_URL)
    for key in client.scan_iter("gatehouse:rate:*"):
        client.delete(key)
    yield
    for key in client.scan_iter("gatehouse:rate:*"):
        client.delete(key)


def hit_from_another_process(agent_id: int, times: int) -> None:
    """Count requests from a separate Python process, as a second web process would."""
    code = (
        "import django, sys; django.setup(); from agents import ratelimit; "
        f"[ratelimit.hit({agent_id}) for _ in range({times})]"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "GATEHOUSE_RATE_LIMIT_PER_MINUTE": "5"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=settings.BASE_DIR, timeout=60)


def test_over_the_limit_is_429_with_retry_after(agent_api, limited: None) -> None:
    api: AgentApi = agent_api("support-agent", {"emitir_estorno": 3})
    start_of_a_fresh_window()
    statuses = [api.tools().status_code for _ in range(5)]
    response = api.tools()
    assert statuses == [200] * 5
    assert response.status_code == 429
    assert response.json()["error"] == "rate_limited"
    assert 1 <= int(response["Retry-After"]) <= 60


def test_the_limit_is_shared_with_other_processes(make_agent, limited: None) -> None:
    agent, token = make_agent("support-agent", {"emitir_estorno": 3})
    start_of_a_fresh_window()
    hit_from_another_process(agent.pk, 5)
    from django.test import Client

    response = Client().get("/api/v1/tools", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 429


def test_agents_are_limited_separately(make_agent, limited: None) -> None:
    first, _ = make_agent("agent-one", {})
    second, _ = make_agent("agent-two", {})
    start_of_a_fresh_window()
    for _ in range(6):
        ratelimit.hit(first.pk)
    assert not ratelimit.hit(first.pk).allowed
    assert ratelimit.hit(second.pk).allowed


def test_an_unreachable_redis_lets_requests_through(make_agent, limited: None, settings) -> None:
    settings.GATEHOUSE_REDIS_URL = "redis://127.0.0.1:1/0"
    agent, _ = make_agent("support-agent", {})
    assert all(ratelimit.hit(agent.pk).allowed for _ in range(10))
