"""Budgets: per conversation and per agent window, spent atomically with the insert, across web processes."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.apps import apps

from agents.budgets import BudgetExhausted, budgets_for, spend
from agents.models import Agent, BudgetCounter, BudgetScope
from approvals.models import ToolCall
from audit.chain import first_break
from audit.models import Event
from tests.conftest import AgentApi, AgentFactory, refund
from tests.processes import BASE_DIR, free_port, session_database_url, wait_until

PARALLEL = 40
# Windows of 68 years: no window boundary falls during a test, whatever the clock says.
LONG_WINDOW = 2**31


class WebProcess:
    """A real `uvicorn config.asgi:application` process on the test database."""

    def __init__(self, folder: Path, store: str) -> None:
        self.port = free_port()
        self.folder = folder
        self.store = store
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> WebProcess:
        """Start the server and return once it answers."""
        env = {**os.environ, "DATABASE_URL": session_database_url(), "GATEHOUSE_VAR_DIR": str(self.folder)}
        env.update(GATEHOUSE_DB_POOL_MIN="1", GATEHOUSE_DB_POOL_MAX="8", PYTHONUNBUFFERED="1")
        env.update(GATEHOUSE_AGENT_BUDGET_WINDOW_SECONDS=str(LONG_WINDOW), GATEHOUSE_POSTGRESQL_STORE=self.store)
        args = [sys.executable, "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1"]
        args += ["--port", str(self.port), "--log-level", "warning"]
        log = (self.folder / "web.log").open("ab")
        self.process = subprocess.Popen(args, cwd=BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT)
        wait_until(self.answers, timeout=40, interval=0.1)
        return self

    def answers(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"the web process exited: {(self.folder / 'web.log').read_text()[-4000:]}")
        try:
            return httpx.get(f"{self.url}/healthz", timeout=2).status_code in (200, 503)
        except httpx.TransportError:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=15)


@pytest.fixture(scope="module", params=["1", "0"], ids=["postgresql-store", "portable-twin"])
def two_web_processes(
    request: pytest.FixtureRequest, django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[str]]:
    """Two web server processes of their own (as in production behind a balancer); yield their base URLs.

    Once with approvals.store's PostgreSQL statements, once with their portable twins.
    """
    servers = [WebProcess(tmp_path_factory.mktemp(f"web-{n}"), request.param) for n in range(2)]
    try:
        yield [server.start().url for server in servers]
    finally:
        for server in servers:
            server.stop()


def propose_at_once(urls: list[str], token: str, bodies: list[dict[str, Any]]) -> list[tuple[int, str | None]]:
    """Send every body at the same moment, alternating between the servers; return (status, error code) each."""
    start = threading.Barrier(len(bodies))

    def send(n: int) -> tuple[int, str | None]:
        with httpx.Client(base_url=urls[n % len(urls)], headers={"Authorization": f"Bearer {token}"}) as client:
            start.wait()
            response = client.post("/api/v1/tool-calls", json=bodies[n], timeout=60)
        return response.status_code, response.json().get("error")

    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        return list(pool.map(send, range(len(bodies))))


@pytest.mark.django_db(transaction=True)
def test_forty_parallel_proposals_over_two_web_processes_store_exactly_the_conversation_budget(
    two_web_processes: list[str], make_agent: AgentFactory
) -> None:
    agent, token = make_agent("racer", {"emitir_estorno": 3})
    Agent.objects.filter(pk=agent.pk).update(max_calls_per_conversation=5)
    # Tier 2: held for a reviewer, so nothing is sent to a worker.
    bodies = [refund(30000, conversation_id="conv-race", step=n, call_index=0) for n in range(PARALLEL)]
    results = propose_at_once(two_web_processes, token, bodies)
    assert sorted(results) == [(202, None)] * 5 + [(429, "budget_exhausted")] * (PARALLEL - 5)
    assert ToolCall.objects.filter(agent=agent, conversation_id="conv-race").count() == 5
    assert BudgetCounter.objects.get(agent=agent, scope=BudgetScope.CONVERSATION, key="conv-race").used == 5
    # The refused 35 spent the agent's window first, then rolled back: only the 5 stored count.
    assert BudgetCounter.objects.get(agent=agent, scope=BudgetScope.WINDOW).used == 5
    assert Event.objects.filter(action="call.refused", data__error="budget_exhausted").count() == PARALLEL - 5
    assert first_break() is None


@pytest.mark.django_db(transaction=True)
def test_forty_parallel_proposals_over_two_web_processes_store_exactly_the_agent_window_budget(
    two_web_processes: list[str], make_agent: AgentFactory
) -> None:
    agent, token = make_agent("escaper", {"emitir_estorno": 3})
    Agent.objects.filter(pk=agent.pk).update(max_calls_per_window=7)
    # Half name a conversation of their own, half none: no envelope field escapes the agent's budget.
    bodies = [
        refund(30000, idempotency_key=f"w-{n}", **({"conversation_id": f"fresh-{n}"} if n % 2 else {}))
        for n in range(PARALLEL)
    ]
    results = propose_at_once(two_web_processes, token, bodies)
    assert sorted(results) == [(202, None)] * 7 + [(429, "budget_exhausted")] * (PARALLEL - 7)
    assert ToolCall.objects.filter(agent=agent).count() == 7
    assert first_break() is None


@pytest.fixture
def support(agent_api: Any, settings: Any) -> AgentApi:
    settings.GATEHOUSE_AGENT_BUDGET_WINDOW_SECONDS = LONG_WINDOW
    return agent_api()


def conversation_step(step: int, **extra: Any) -> dict[str, Any]:
    return refund(conversation_id="c1", step=step, call_index=0, **extra)


def test_replays_spend_nothing_from_a_conversation_budget(support: AgentApi) -> None:
    Agent.objects.update(max_calls_per_conversation=2)
    assert support.propose(conversation_step(0)).status_code == 201
    for _ in range(3):
        assert support.propose(conversation_step(0)).status_code == 200
    assert support.propose(conversation_step(1)).status_code == 201
    refused = support.propose(conversation_step(2))
    assert (refused.status_code, refused.json()["error"], refused.json()["scope"]) == (
        429,
        "budget_exhausted",
        "conversation",
    )
    assert ToolCall.objects.filter(conversation_id="c1").count() == 2


def test_refused_proposals_spend_nothing_from_a_conversation_budget(support: AgentApi) -> None:
    Agent.objects.update(max_calls_per_conversation=2)
    for step in range(3):
        assert support.propose(conversation_step(step, motivo="x")).status_code == 422
    for step in range(3, 5):
        assert support.propose(conversation_step(step)).status_code == 201
    assert support.propose(conversation_step(5)).status_code == 429


def test_the_agent_window_budget_applies_whatever_the_conversation_id_says(support: AgentApi) -> None:
    Agent.objects.update(max_calls_per_window=3, max_calls_per_conversation=100)
    envelopes = [{}, {"conversation_id": "a"}, {"conversation_id": "b"}]
    for n, envelope in enumerate(envelopes):
        assert support.propose(refund(idempotency_key=f"k-{n}", **envelope)).status_code == 201
    for n, envelope in enumerate([{}, {"conversation_id": "new"}, {"conversation_id": "a"}]):
        refused = support.propose(refund(idempotency_key=f"k-more-{n}", **envelope))
        assert refused.status_code == 429
        assert (refused.json()["error"], refused.json()["scope"], refused.json()["budget"]) == (
            "budget_exhausted",
            "agent",
            3,
        )
        assert 1 <= int(refused["Retry-After"]) <= LONG_WINDOW
    assert ToolCall.objects.count() == 3
    # A call the budget already paid for still comes back as a replay.
    assert support.propose(refund(idempotency_key="k-1", conversation_id="a")).status_code == 200


def test_the_window_budget_is_on_by_default_from_settings_and_an_agent_may_set_its_own(
    support: AgentApi, settings: Any
) -> None:
    settings.GATEHOUSE_AGENT_BUDGET_CALLS = 2
    assert Agent.objects.get().max_calls_per_window is None
    for n in range(2):
        assert support.propose(refund(idempotency_key=f"d-{n}")).status_code == 201
    assert support.propose(refund(idempotency_key="d-2")).json()["error"] == "budget_exhausted"
    Agent.objects.update(max_calls_per_window=0)  # this agent: no window limit
    assert support.propose(refund(idempotency_key="d-3")).status_code == 201


def test_a_window_budget_refills_in_the_next_window_and_a_refusal_spends_nothing(
    make_agent: AgentFactory, settings: Any
) -> None:
    settings.GATEHOUSE_AGENT_BUDGET_WINDOW_SECONDS = 3600
    agent, _ = make_agent("windowed")
    agent.max_calls_per_window = 2
    now = datetime(2026, 12, 1, 14, 59, 58, tzinfo=UTC)
    for _ in range(2):
        spend(agent, budgets_for(agent, "", now), now)
    with pytest.raises(BudgetExhausted) as refused:
        spend(agent, budgets_for(agent, "", now), now)
    assert refused.value.retry_after == 2
    assert BudgetCounter.objects.get(agent=agent).used == 2
    later = now + timedelta(seconds=2)
    spend(agent, budgets_for(agent, "", later), later)
    assert sorted(BudgetCounter.objects.filter(agent=agent).values_list("used", flat=True)) == [1, 2]


def test_a_dry_run_spends_no_budget_and_says_when_it_is_exhausted(support: AgentApi) -> None:
    Agent.objects.update(max_calls_per_conversation=1)
    assert support.propose(conversation_step(0, dry_run=True)).status_code == 200
    assert support.propose(conversation_step(0)).status_code == 201
    preview = support.propose(conversation_step(1, dry_run=True))
    assert (preview.status_code, preview.json()["error"]) == (429, "budget_exhausted")
    assert ToolCall.objects.count() == 1


def test_the_upgrade_starts_each_conversation_counter_at_the_calls_it_had_accepted(support: AgentApi) -> None:
    for step in range(3):
        support.propose(conversation_step(step))
    support.propose(conversation_step(3, motivo="x"))  # refused: it spent nothing
    BudgetCounter.objects.all().delete()  # as before the upgrade: no counters
    backfill = importlib.import_module("approvals.migrations.0005_backfill_conversation_budgets")
    backfill.count_conversations(apps, None)
    assert list(BudgetCounter.objects.values_list("scope", "key", "used")) == [(BudgetScope.CONVERSATION, "c1", 3)]
