"""Many replicas: two complete sets of Gatehouse's processes on one PostgreSQL database and one Redis.

Each set runs the Procfile's web server, worker and beat (and the audit sequencer
once the tree has one) with its own var folder and port (tests/replicas.py). Agents
propose through both web servers, over REST and MCP, at every tier; every execution
message is delivered twice, as at-least-once delivery may; two reviewers race on the
same held calls, each in the console of another replica, and a third approves one in
Chromium; a batch of approval windows closes at the instant both beats fire; a worker
is SIGKILLed while its request is in flight downstream. Then: every call that ran
reached the downstream exactly once (the killed one twice: the attempt cut short and
its one re-send), every proposal ended in a final state, every event was sealed once
and the chain verifies, and the sweepers did their work once (one expiry, one lease
release, one re-send each).
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.utils import timezone
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from playwright.sync_api import Browser, expect

from approvals.execution import downstream_key
from approvals.messages import EXECUTE_CALL
from approvals.models import ToolCall
from audit.models import Event
from config.celery import app as celery_app
from tests.conftest import AgentFactory
from tests.processes import _purge, wait_until
from tests.replicas import (
    Downstream,
    ReplicaSet,
    Reviewer,
    has_sequencer,
    process_holding_connection,
    replica_processes,
    serving_downstream,
)
from tests.replicas import replica_sets as start_replica_sets
from toolcatalog.models import Tool

pytestmark = [pytest.mark.worker, pytest.mark.browser]

AGENTS = 4
PROPOSALS_PER_AGENT = 16
# What each proposal of an agent asks for, in turn: (kind, tool, refund in centavos; None for the read).
# Tier 3 ("expiring") waits for two reviewers who never come: its window closes.
WORKLOAD = [
    ("read", "get_order_status", None),
    ("auto", "emitir_estorno", 5_000),
    ("held", "emitir_estorno", 30_000),
    ("expiring", "emitir_estorno", 600_000),
    ("auto", "emitir_estorno", 9_000),
    ("held", "emitir_estorno", 45_000),
    ("expiring", "emitir_estorno", 700_000),
    ("expiring", "emitir_estorno", 800_000),
]
REPLAYED = 4  # proposals sent to both web servers at once
KILLED_ORDER = "PED-00009999"
PASSWORD = "replica-reviewer-password"
FINAL = {"succeeded", "rejected", "expired", "failed", "needs_reconciliation", "refused"}
SETTLE_TIMEOUT = 60.0


@dataclass(frozen=True)
class Proposed:
    """One proposal as its agent saw it: through which replica, what it was, what came back."""

    call_id: str
    kind: str
    via: str
    status: str
    code: int = 200  # the HTTP status of a REST proposal: 201/202 a new call, 200 a replay


@pytest.fixture
def downstream(transactional_db: None, catalog: dict[str, Any]) -> Iterator[tuple[str, Downstream]]:
    """The demo tools, pointed at a counting downstream."""
    with serving_downstream() as (url, seen):
        for name in ("emitir_estorno", "get_order_status"):
            Tool.objects.filter(name=name).update(executor_ref=f"{url}/{name}")
        yield url, seen


@pytest.fixture
def replicas(downstream: tuple[str, Downstream], tmp_path: Path) -> Iterator[list[ReplicaSet]]:
    _purge(settings.CELERY_BROKER_URL)
    with start_replica_sets(tmp_path) as sets:
        yield sets


def reviewer_account(username: str) -> User:
    user = User.objects.create_user(username, password=PASSWORD)
    user.user_permissions.add(Permission.objects.get(codename="review_toolcall"))
    return user


def proposal(tool: str, order: int, centavos: int | None) -> dict[str, Any]:
    """Return a proposal body: a lookup of order number `order`, or a refund of `centavos` from it."""
    key, pedido = uuid.uuid4().hex, f"PED-{order:08d}"
    if centavos is None:
        return {"tool": tool, "arguments": {"order_id": pedido}, "idempotency_key": key}
    refund = {"pedido_id": pedido, "valor_centavos": centavos, "motivo": "atraso_entrega", "idempotency_key": key}
    return {"tool": tool, "arguments": refund, "idempotency_key": key}


# ------------------------------------------------------------------ agents


class Agents:
    """Agents proposing through the replicas' REST API and MCP endpoint; every execution message sent twice."""

    def __init__(self, sets: list[ReplicaSet], tokens: dict[str, str]) -> None:
        self.sets = sets
        self.tokens = tokens
        self.send_lock = threading.Lock()

    def propose(self, agent: str, via: ReplicaSet, body: dict[str, Any], kind: str) -> Proposed:
        response = httpx.post(
            f"{via.url}/api/v1/tool-calls",
            json=body,
            headers={"Authorization": f"Bearer {self.tokens[agent]}"},
            timeout=30,
        )
        assert response.status_code in {200, 201, 202}, response.text
        call = response.json()
        if response.status_code == 201:
            self.deliver_again(call["id"], agent, body["tool"])
        return Proposed(call["id"], kind, via.name, call["status"], response.status_code)

    def deliver_again(self, call_id: str, agent: str, tool: str) -> None:
        """Send the call's execution message once more, as a broker delivering at least once may."""
        kwargs = {"call_id": call_id, "attempts": 0, "agent": agent, "tool": tool}
        with self.send_lock:
            celery_app.send_task(EXECUTE_CALL, kwargs=kwargs)

    def propose_over_mcp(self, agent: str, via: ReplicaSet, body: dict[str, Any]) -> Proposed:
        meta = {"gatehouse/idempotency_key": body["idempotency_key"], "gatehouse/wait_seconds": 0}

        async def call() -> Any:
            headers = {"Authorization": f"Bearer {self.tokens[agent]}"}
            async with (
                httpx2.AsyncClient(headers=headers, timeout=30) as http,
                streamable_http_client(f"{via.url}/mcp", http_client=http) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                return await session.call_tool(body["tool"], body["arguments"], meta=meta)

        result = asyncio.run(call())
        assert result.is_error is False, result
        body = result.structured_content
        return Proposed(body["id"], "mcp", via.name, body["status"])


def drive_agents(agents: Agents, names: list[str]) -> tuple[list[Proposed], list[list[Proposed]]]:
    """Propose the workload through both replicas at once; return what came back, and the replayed pairs."""
    jobs: list[Callable[[], Proposed]] = []
    order = 0
    for number, agent in enumerate(names):
        for index in range(PROPOSALS_PER_AGENT):
            kind, tool, centavos = WORKLOAD[index % len(WORKLOAD)]
            order += 1
            body = proposal(tool, order, centavos)
            via = agents.sets[(number + index) % 2]
            jobs.append(partial(agents.propose, agent, via, body, kind))
        for via in agents.sets:  # a few over MCP, through each replica
            order += 1
            body = proposal("emitir_estorno", order, 7_000)
            jobs.append(partial(agents.propose_over_mcp, agent, via, body))
    with ThreadPoolExecutor(max_workers=8) as pool:
        proposed = list(pool.map(lambda job: job(), jobs))
        replays = []
        for number in range(REPLAYED):
            order += 1
            agent = names[number % len(names)]
            body = proposal("emitir_estorno", order, 3_000)
            both = [pool.submit(agents.propose, agent, via, body, "replayed") for via in agents.sets]
            replays.append([future.result() for future in both])
    return proposed, replays


# ------------------------------------------------------------------ reviewers


def review_in_both_consoles(sets: list[ReplicaSet], held: list[str]) -> set[str]:
    """Alice (replica a) and Bob (replica b) race on every held call; return the calls Alice tried to reject.

    Bob approves every call; Alice approves three of four and rejects the fourth. One
    decision wins each race, whichever replica it went through.
    """
    alice, bob = Reviewer(sets[0].url, "alice", PASSWORD), Reviewer(sets[1].url, "bob", PASSWORD)
    rejecting = {call_id for number, call_id in enumerate(held) if number % 4 == 0}

    def alice_decides() -> None:
        for call_id in held:
            fields = alice.open(call_id)
            if fields is None:
                continue
            if call_id in rejecting:
                alice.reject(call_id, fields, "Refunded by phone already.")
            else:
                alice.approve(call_id, fields)

    def bob_decides() -> None:
        for call_id in held:
            fields = bob.open(call_id)
            if fields is not None:
                bob.approve(call_id, fields)

    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            for future in [pool.submit(alice_decides), pool.submit(bob_decides)]:
                future.result()
    finally:
        alice.close()
        bob.close()
    return rejecting


def approve_in_chromium(browser: Browser, replica: ReplicaSet, call_id: str) -> None:
    """Carol approves the call in Chromium, in the console of `replica`, and sees it run without a reload."""
    context = browser.new_context(base_url=replica.url)
    try:
        page = context.new_page()
        page.goto("/accounts/login/")
        page.get_by_label("Username").fill("carol")
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url(f"{replica.url}/")
        page.goto(f"/calls/{call_id}/")
        page.locator("#approve-button").click()
        expect(page.locator("#call-live .status")).to_have_text("Succeeded", timeout=SETTLE_TIMEOUT * 1000)
    finally:
        context.close()


# ------------------------------------------------------------------ the clock


def close_the_windows_of(call_ids: list[str]) -> None:
    """Let the approval windows of these pending calls close at once, and both beats fire at that moment.

    The worst case for two beats: both send the sweep within the same instant, so two
    workers sweep the same due calls at the same time.
    """
    ToolCall.objects.filter(pk__in=call_ids, status="pending_approval").update(expires_at=timezone.now())
    for _ in range(2):
        celery_app.send_task("approvals.tasks.sweep")


# ------------------------------------------------------------------ a worker killed mid-request


def kill_the_worker_holding_a_request(agents: Agents, agent: str, downstream_url: str, downstream: Downstream) -> str:
    """Propose a call whose request the downstream holds open, SIGKILL the worker that sent it; return its id.

    The killed worker's replica starts a worker again, as its supervisor would; the
    sweepers of both replicas find the lease expired.
    """
    downstream.hold_first_request_for(KILLED_ORDER)
    body = proposal("emitir_estorno", int(KILLED_ORDER.removeprefix("PED-")), 4_000)
    proposed = agents.propose(agent, agents.sets[0], body, "killed")
    assert proposed.code == 201
    assert downstream.held_arrived.wait(timeout=30), "the request never reached the downstream"
    port = int(downstream_url.rsplit(":", 1)[1])
    workers = {replica.processes["worker"].pid: replica for replica in agents.sets}
    pid = process_holding_connection(downstream.held_sender_port, port, list(workers))
    assert pid is not None, "no worker holds the held request's connection"
    victim = workers[pid]
    victim.kill("worker")
    downstream.release.set()  # its answer now goes to a dead socket
    victim.restart_worker()
    return proposed.call_id


# ------------------------------------------------------------------ what the database says


def unsettled() -> int:
    return ToolCall.objects.exclude(status__in=FINAL).count()


def all_sealed() -> bool:
    return not Event.objects.filter(seq__isnull=True).exists()


def events_by_call() -> dict[str, Counter[str]]:
    counts: dict[str, Counter[str]] = {}
    for call_id, action in Event.objects.exclude(call_id=None).values_list("call_id", "action"):
        counts.setdefault(str(call_id), Counter())[action] += 1
    return counts


# ------------------------------------------------------------------ what must hold


def assert_nothing_lost(kinds: dict[str, str], replays: list[list[Proposed]], killed: str) -> dict[str, ToolCall]:
    """Every proposal is one call (a replay included), and every call ended; return the calls by id."""
    for pair in replays:
        assert sorted(p.code for p in pair) == [200, 201], pair
        assert pair[0].call_id == pair[1].call_id
    calls = {str(call.pk): call for call in ToolCall.objects.all()}
    assert set(calls) == set(kinds) | {killed}
    assert {call.status for call in calls.values()} <= {"succeeded", "rejected", "expired"}
    return calls


def assert_each_call_went_where_its_tier_sends_it(
    calls: dict[str, ToolCall], kinds: dict[str, str], rejecting: set[str]
) -> None:
    for call_id, kind in kinds.items():
        status = calls[call_id].status
        if kind in {"read", "auto", "mcp", "replayed"}:
            assert status == "succeeded", (kind, calls[call_id].error)
        elif kind == "expiring":
            assert status == "expired"
        elif call_id in rejecting:  # Alice's rejection raced Bob's approval: either may have won
            assert status in {"rejected", "succeeded"}
        else:
            assert status == "succeeded", (call_id, status)


def assert_every_call_that_ran_reached_the_downstream_once(
    calls: dict[str, ToolCall], kinds: dict[str, str], killed: str, seen: Downstream
) -> None:
    """One effect, one claim, one decision, one expiry per call; and the killed call's one re-send."""
    events = events_by_call()
    for call_id, call in calls.items():
        if call_id == killed:
            continue
        ran = call.status == "succeeded"
        assert seen.effects[downstream_key(call_id)] == int(ran), (call_id, call.status)
        assert events[call_id]["call.proposed"] == 1
        assert events[call_id]["call.execution_started"] == int(ran), events[call_id]
        assert events[call_id]["call.succeeded"] == int(ran)
        assert events[call_id]["call.approved"] + events[call_id]["call.rejected"] == int(kinds[call_id] == "held")
        assert events[call_id]["call.expired"] == int(call.status == "expired"), events[call_id]
        assert events[call_id]["call.lease_expired"] == 0

    # The killed worker's call: its lease released once, re-sent once, run once more with the same key.
    assert calls[killed].status == "succeeded" and calls[killed].attempts == 2
    assert seen.effects[downstream_key(killed)] == 2
    assert events[killed]["call.lease_expired"] == 1, events[killed]
    assert events[killed]["call.requeued"] == 1, events[killed]
    assert events[killed]["call.execution_started"] == 2, events[killed]
    assert events[killed]["call.succeeded"] == 1, events[killed]


# ------------------------------------------------------------------ the test


def test_two_replica_sets_run_every_call_once_lose_none_verify_the_chain_and_sweep_once(
    replicas: list[ReplicaSet], downstream: tuple[str, Downstream], make_agent: AgentFactory, browser: Browser
) -> None:
    downstream_url, seen = downstream
    grants = {"emitir_estorno": 3, "get_order_status": 0}
    tokens: dict[str, str] = {}
    for number in range(AGENTS):
        agent, token = make_agent(f"replica-agent-{number}", grants)
        tokens[agent.name] = token
    for username in ("alice", "bob", "carol"):
        reviewer_account(username)
    agents = Agents(replicas, tokens)

    proposed, replays = drive_agents(agents, sorted(tokens))
    held = [p.call_id for p in proposed if p.kind == "held"]
    rejecting = review_in_both_consoles(replicas, held[1:])
    approve_in_chromium(browser, replicas[1], held[0])
    close_the_windows_of([p.call_id for p in proposed if p.kind == "expiring"])
    wait_until(lambda: not ToolCall.objects.filter(status__in=["approved", "executing"]).exists(), SETTLE_TIMEOUT)
    killed = kill_the_worker_holding_a_request(agents, sorted(tokens)[0], downstream_url, seen)
    wait_until(lambda: unsettled() == 0, SETTLE_TIMEOUT, interval=0.5)
    if has_sequencer():
        wait_until(all_sealed, timeout=15, interval=0.2)
    for replica in replicas:
        replica.assert_alive()

    kinds = {p.call_id: p.kind for p in proposed} | {pair[0].call_id: "replayed" for pair in replays}
    calls = assert_nothing_lost(kinds, replays, killed)
    assert_each_call_went_where_its_tier_sends_it(calls, kinds, rejecting)
    assert {p.via for p in proposed if p.kind == "held" and calls[p.call_id].status == "succeeded"} == {"a", "b"}
    assert_every_call_that_ran_reached_the_downstream_once(calls, kinds, killed, seen)

    # The chain: every event sealed once, in one contiguous sequence, and it verifies.
    seqs = list(Event.objects.order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    call_command("audit_verify")

    # Every process of both replicas was still running, and stops as a supervisor stops it.
    for replica in replicas:
        exits = replica.stop_all()
        assert set(exits) == set(replica_processes(replica.name)), exits
        assert all(code in {0, -15} for code in exits.values()), (replica.name, exits, replica.logs())
