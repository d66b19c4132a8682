"""Per-agent rate limits are counted in Redis, so every web process shares them.

Without Redis they fail open, loudly: requests pass, a warning says so at most once a
minute, `/metrics` counts every request let through; never a count kept per process.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import redis
from django.conf import settings
from django.test import Client

from agents import ratelimit, redisclient
from tests.conftest import AgentApi, start_of_a_fresh_window
from tests.processes import RedisServer

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


METRICS_TOKEN = "metrics-token-for-tests"
UNAVAILABLE = "gatehouse_redis_unavailable_total"
SAID = "Redis unavailable for rate_limit"


@pytest.fixture
def said_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start with no outage said or remembered by this process (an earlier test's would hold the warning back)."""
    monkeypatch.setattr(ratelimit, "OUTAGE", redisclient.Outage("rate_limit", ratelimit.OUTAGE.consequence))
    monkeypatch.setattr(ratelimit, "_failed_at", None)


def let_through(settings) -> float:
    """Return the requests let through unlimited so far, as this process's /metrics says."""
    settings.GATEHOUSE_METRICS_TOKEN = METRICS_TOKEN
    response = Client().get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert response.status_code == 200
    lines = [line for line in response.content.decode().splitlines() if line.startswith(UNAVAILABLE)]
    return sum(float(line.split()[-1]) for line in lines if 'use="rate_limit"' in line)


def warnings_said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.getMessage().startswith(SAID)]


def test_an_unreachable_redis_lets_requests_through_and_says_so_once(
    make_agent, limited: None, settings, said_afresh: None, caplog: pytest.LogCaptureFixture
) -> None:
    settings.GATEHOUSE_REDIS_URL = "redis://127.0.0.1:1/0"
    agent, _ = make_agent("support-agent", {})
    before = let_through(settings)

    with caplog.at_level(logging.WARNING, logger="agents.redisclient"):
        allowed = [ratelimit.hit(agent.pk).allowed for _ in range(10)]

    assert allowed == [True] * 10
    assert len(warnings_said(caplog)) == 1
    assert let_through(settings) == before + 10


def test_without_redis_nothing_is_counted_per_process_and_that_is_said(
    make_agent, limited: None, settings, said_afresh: None, caplog: pytest.LogCaptureFixture
) -> None:
    settings.GATEHOUSE_REDIS_URL = ""  # the embedded demo
    agent, _ = make_agent("support-agent", {})

    with caplog.at_level(logging.WARNING, logger="agents.redisclient"):
        allowed = [ratelimit.hit(agent.pk).allowed for _ in range(12)]

    assert allowed == [True] * 12  # a limit of 5: a count kept in this process would have refused 7
    assert warnings_said(caplog) == [f"{SAID} (no GATEHOUSE_REDIS_URL): {ratelimit.OUTAGE.consequence}"]


def test_redis_stopped_and_started_again_fails_open_loudly_then_limits_again(
    agent_api,
    private_redis: RedisServer,
    settings,
    said_afresh: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings.GATEHOUSE_REDIS_URL = private_redis.url
    settings.GATEHOUSE_RATE_LIMIT_PER_MINUTE = 3
    api: AgentApi = agent_api("support-agent", {"emitir_estorno": 3})
    start_of_a_fresh_window()
    assert [api.tools().status_code for _ in range(4)] == [200, 200, 200, 429]
    before = let_through(settings)

    private_redis.stop()
    with caplog.at_level(logging.WARNING, logger="agents.redisclient"):
        during = [api.tools().status_code for _ in range(10)]
    assert during == [200] * 10
    assert len(warnings_said(caplog)) == 1
    assert let_through(settings) == before + 10

    private_redis.start()  # the same port, empty: this window counts from zero there
    time.sleep(ratelimit.RETRY_AFTER_FAILURE)
    with caplog.at_level(logging.WARNING, logger="agents.redisclient"):
        after = [api.tools().status_code for _ in range(4)]
    assert after == [200, 200, 200, 429]
    assert "Redis reachable again for rate_limit" in caplog.messages
    assert let_through(settings) == before + 10
