"""Redis behind Sentinel: the broker and Gatehouse's own Redis uses find the master through real sentinels.

Each test starts its own redis-server and a `redis-server --sentinel` watching it,
and names Redis only by a `sentinel://` URL whose first sentinel is not even running:
every count, notice and message below reached the master the sentinels named.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import connection

from agents import ratelimit, redisclient
from approvals import lifecycle, notices, watch
from approvals.models import ToolCall
from tests.conftest import AgentApi, refund, start_of_a_fresh_window
from tests.processes import BASE_DIR, CeleryWorker, RedisServer, SentinelServer, free_port, use_broker, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@dataclass
class SentinelRedis:
    master: RedisServer
    sentinel: SentinelServer
    # Its first sentinel is one nobody runs: a client must go on to the next.
    url: str

    def direct(self) -> redis.Redis:
        """A client of the master itself, to see what reached it."""
        return redis.Redis(port=self.master.port)


@pytest.fixture
def sentinel_redis(tmp_path: Path) -> Iterator[SentinelRedis]:
    master = RedisServer(tmp_path)
    master.start()
    sentinel = SentinelServer(tmp_path, master.port)
    try:
        sentinel.start()
        yield SentinelRedis(master, sentinel, f"sentinel://127.0.0.1:{free_port()};{sentinel.url()}")
    finally:
        sentinel.stop()
        master.stop()


@pytest.fixture
def through_sentinel(sentinel_redis: SentinelRedis, settings: Any) -> SentinelRedis:
    """Point Gatehouse's own Redis (rate limits, notices, waiters) at the sentinels."""
    settings.GATEHOUSE_REDIS_URL = sentinel_redis.url
    settings.GATEHOUSE_REDIS_SENTINEL_MASTER = SentinelServer.MASTER
    return sentinel_redis


def reviewer() -> Any:
    user = get_user_model().objects.create_user("rita")
    user.user_permissions.add(Permission.objects.get(codename="review_toolcall"))
    return get_user_model().objects.get(pk=user.pk)  # fresh: permissions are cached per instance


def test_a_sentinel_url_gives_a_client_of_the_master_the_sentinels_name(
    through_sentinel: SentinelRedis, settings: Any
) -> None:
    client = redisclient.client(settings.GATEHOUSE_REDIS_URL, timeout=1.0)

    client.set("gatehouse:probe", "through-sentinel")

    assert through_sentinel.direct().get("gatehouse:probe") == b"through-sentinel"


def test_proposals_are_rate_limited_in_the_master_the_sentinels_name(
    through_sentinel: SentinelRedis, agent_api: Any, settings: Any
) -> None:
    settings.GATEHOUSE_RATE_LIMIT_PER_MINUTE = 3
    api: AgentApi = agent_api()
    start_of_a_fresh_window()

    statuses = [api.propose(refund(100 + n, idempotency_key=f"s-{n}")).status_code for n in range(4)]

    assert statuses == [201, 201, 201, 429]
    (key,) = through_sentinel.direct().keys("gatehouse:rate:*")
    assert through_sentinel.direct().get(key) == b"4"


def test_a_held_calls_waiter_is_told_through_the_master_the_sentinels_name(
    through_sentinel: SentinelRedis, agent_api: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watch, "SAFETY_POLL", 60.0)  # told, or not back in time: no polling
    response = agent_api().propose(refund(35000, idempotency_key="held-sentinel"))
    assert response.status_code == 202
    call = ToolCall.objects.get(pk=response.json()["id"])
    seen: list[dict[str, Any]] = []

    def wait() -> None:
        try:
            seen.append(watch.wait_for(ToolCall.objects.get(pk=call.pk), 60.0, until_changed_from="pending_approval"))
        finally:
            connection.close()

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    channel = notices.channel(call.pk)
    wait_until(lambda: dict(through_sentinel.direct().pubsub_numsub(channel)).get(channel.encode(), 0) > 0)
    assert lifecycle.reject(call, reviewer(), "Not this customer.")
    waiter.join(10)

    assert not waiter.is_alive()
    assert seen[0]["status"] == "rejected"


@pytest.mark.worker
def test_a_worker_on_a_sentinel_broker_executes_a_call_a_reviewer_approved(
    sentinel_redis: SentinelRedis, start_worker: Any, demo_services: str, agent_api: Any
) -> None:
    from config.celery import app

    url = sentinel_redis.url
    worker: CeleryWorker = start_worker(url, GATEHOUSE_REDIS_SENTINEL_MASTER=SentinelServer.MASTER)
    response = agent_api().propose(refund(35000, pedido="PED-00000005", idempotency_key="sentinel-broker"))
    assert response.status_code == 202, response.content
    call = ToolCall.objects.get(pk=response.json()["id"])
    options = app.conf.broker_transport_options
    # As config.celery configures a process whose CELERY_BROKER_URL is this one.
    app.conf.broker_transport_options = {**options, "master_name": SentinelServer.MASTER}
    try:
        with use_broker(url):
            assert lifecycle.approve(call, reviewer())  # the message is sent as the approval commits
    finally:
        app.conf.broker_transport_options = options

    wait_until(lambda: ToolCall.objects.filter(pk=call.pk, status="succeeded").exists(), timeout=30)
    assert "Connected to sentinel://" in worker.log_path.read_text()  # the broker kombu reached through a sentinel


def test_after_a_failover_rate_limits_are_counted_in_the_master_the_sentinels_promoted(
    tmp_path: Path, settings: Any, make_agent: Any
) -> None:
    master = RedisServer(tmp_path)
    replica = RedisServer(tmp_path, replica_of=master.port)
    sentinel = SentinelServer(tmp_path, master.port)
    try:
        master.start()
        replica.start()
        wait_until(lambda: redis.Redis(port=replica.port).info("replication")["master_link_status"] == "up")
        sentinel.start()
        wait_until(lambda: redis.Redis(port=sentinel.port).sentinel_slaves(SentinelServer.MASTER))
        settings.GATEHOUSE_REDIS_URL = sentinel.url()
        settings.GATEHOUSE_REDIS_SENTINEL_MASTER = SentinelServer.MASTER
        settings.GATEHOUSE_RATE_LIMIT_PER_MINUTE = 1000
        agent, _ = make_agent("support-agent", {})
        start_of_a_fresh_window()
        for _ in range(3):
            ratelimit.hit(agent.pk)
        (key,) = redis.Redis(port=master.port).keys("gatehouse:rate:*")

        master.stop()
        wait_until(lambda: sentinel.master() == ("127.0.0.1", replica.port), timeout=30)

        promoted = redis.Redis(port=replica.port)
        wait_until(lambda: ratelimit.hit(agent.pk) and int(promoted.get(key) or 0) > 3, interval=0.2)
        assert promoted.info("replication")["role"] == "master"
    finally:
        sentinel.stop()
        replica.stop()
        master.stop()


@pytest.mark.parametrize("variable", ["CELERY_BROKER_URL", "GATEHOUSE_REDIS_URL"])
def test_a_process_refuses_to_start_on_a_sentinel_url_without_the_masters_name(variable: str) -> None:
    environ = {**os.environ, variable: "sentinel://127.0.0.1:26379", "DJANGO_SETTINGS_MODULE": "config.settings"}
    environ.pop("GATEHOUSE_REDIS_SENTINEL_MASTER", None)

    started = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=BASE_DIR,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert started.returncode != 0
    assert "GATEHOUSE_REDIS_SENTINEL_MASTER" in started.stderr


def test_the_broker_is_asked_for_the_master_the_variable_names() -> None:
    environ = {
        **os.environ,
        "CELERY_BROKER_URL": "sentinel://127.0.0.1:26379;sentinel://127.0.0.1:26380",
        "GATEHOUSE_REDIS_SENTINEL_MASTER": "gatehouse-main",
        "DJANGO_SETTINGS_MODULE": "config.settings",
    }
    environ.pop("GATEHOUSE_REDIS_URL", None)
    code = (
        "import django; django.setup(); from django.conf import settings; from config.celery import app; "
        "print(app.conf.broker_transport_options['master_name'], settings.GATEHOUSE_REDIS_URL)"
    )

    started = subprocess.run(
        [sys.executable, "-c", code], cwd=BASE_DIR, env=environ, capture_output=True, text=True, timeout=60
    )

    assert started.returncode == 0, started.stderr
    assert started.stdout.split() == ["gatehouse-main", "sentinel://127.0.0.1:26379;sentinel://127.0.0.1:26380"]
