"""Shared fixtures: the demo catalog, agents with tokens, and an API helper.

The suite runs against real PostgreSQL and Redis (see `make test`); if either is
unreachable the session stops at once with a message saying which.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlparse

import pytest
from django.core.management.base import CommandError
from django.db import OperationalError, connection
from django.test import Client, TransactionTestCase
from psycopg import sql

from agents.models import Agent
from agents.provisioning import create_or_update_agent

# Fixtures that start real processes (Celery workers, beat, servers), and the app's database role, live apart.
pytest_plugins = [
    "tests.processes",
    "tests.mcp_server",
    "tests.browser",
    "tests.app_role",
    "tests.notification_peers",
    "tests.upstream_peers",
]


def _reachable(url: str, default_port: int) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or default_port), timeout=2):
            return True
    except OSError:
        return False


def pytest_sessionstart(session: pytest.Session) -> None:
    database_url = os.environ.get("DATABASE_URL", "")
    broker_url = os.environ.get("CELERY_BROKER_URL", "")
    if database_url.startswith("postgres") and not _reachable(database_url, 5432):
        pytest.exit(f"PostgreSQL is not reachable at {database_url}: start it (see README) and run again.", 3)
    if broker_url.startswith("redis") and not _reachable(broker_url, 6379):
        pytest.exit(f"Redis is not reachable at {broker_url}: start it (see README) and run again.", 3)


def _wants_transactional_db(request: pytest.FixtureRequest) -> bool:
    marker = request.node.get_closest_marker("django_db")
    return (
        "transactional_db" in request.fixturenames
        or "live_server" in request.fixturenames
        or bool(marker and marker.kwargs.get("transaction"))
    )


@pytest.fixture(autouse=True)
def _flushable_audit_table(request: pytest.FixtureRequest) -> Iterator[None]:
    """Let transactional tests' teardown flush the append-only audit table.

    Django empties tables with TRUNCATE after a transactional test, which the audit
    table's trigger refuses (as it must in production). Only the test database's
    teardown switches that one trigger off; the next transactional test switches it on.
    """
    if not _wants_transactional_db(request):
        yield
        return
    request.getfixturevalue("transactional_db")
    set_truncate_trigger(enabled=True)
    yield
    set_truncate_trigger(enabled=False)


FLUSH_ATTEMPTS = 3
DEADLOCK_DETECTED = "40P01"  # PostgreSQL's SQLSTATE


@pytest.fixture(scope="session", autouse=True)
def _flush_survives_a_deadlock() -> Iterator[None]:
    """Retry a transactional test's flush that PostgreSQL chose as a deadlock's victim.

    A module's Celery worker runs beat, whose sweeper reads calls with their agent and
    tool every second; the flush's TRUNCATE locks the same tables in another order, so
    now and then one of the two is cancelled. A cancelled TRUNCATE was rolled back
    whole: running it again is the same flush.
    """
    original = TransactionTestCase._fixture_teardown

    def fixture_teardown(self: TransactionTestCase) -> None:
        for attempt in range(1, FLUSH_ATTEMPTS + 1):
            try:
                return original(self)
            except CommandError as exc:
                if attempt == FLUSH_ATTEMPTS or not _deadlocked(exc):
                    raise

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TransactionTestCase, "_fixture_teardown", fixture_teardown)
        yield


def _deadlocked(exc: BaseException) -> bool:
    # flush's CommandError ← Django's OperationalError ← the driver's error, whose SQLSTATE
    # (40P01) names a deadlock in any server language, unlike its message.
    cause = exc.__cause__
    return isinstance(cause, OperationalError) and getattr(cause.__cause__, "sqlstate", None) == DEADLOCK_DETECTED


@contextmanager
def as_database_owner() -> Iterator[None]:
    """Run the block as the test connection's own login role, then go back to the role it was acting as.

    Tests may act as the app's least-privilege role (`as_app_role`, tests/app_role.py);
    toggling the audit table's triggers, or tampering as an attacker would, needs the owner.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('role')")
        acting_as = cursor.fetchone()[0]  # 'none' when no SET ROLE is in force
        cursor.execute("RESET ROLE")
    try:
        yield
    finally:
        if acting_as != "none":
            statement = sql.SQL("SET ROLE {}").format(sql.Identifier(acting_as))
            with connection.cursor() as cursor:
                cursor.execute(statement.as_string(connection.connection))


def set_truncate_trigger(*, enabled: bool) -> None:
    """Enable or disable the audit table's TRUNCATE guard (PostgreSQL only; as the owner, who alone may)."""
    if connection.vendor != "postgresql":
        return
    with as_database_owner(), connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE audit_event {'ENABLE' if enabled else 'DISABLE'} TRIGGER audit_event_no_truncate")


@pytest.fixture
def catalog(db: None) -> dict[str, Any]:
    """The demo tiers and tools (with their rules), without downstream data or agents."""
    from demo.catalog import TOOLS
    from demo.management.commands.seed_demo import seed_tiers, seed_tool

    tiers = seed_tiers()
    return {spec["name"]: seed_tool(spec, tiers) for spec in TOOLS}


AgentFactory = Callable[..., tuple[Agent, str]]


@pytest.fixture
def make_agent(catalog: dict[str, Any]) -> AgentFactory:
    """Create an agent with grants; returns (agent, token)."""

    def make(
        name: str = "support-agent", grants: dict[str, int] | None = None, owner: str | None = None
    ) -> tuple[Agent, str]:
        return create_or_update_agent(
            name, grants if grants is not None else {"emitir_estorno": 3}, owner_username=owner
        )

    return make


class AgentApi:
    """A thin JSON client for the agent API, bound to one token."""

    def __init__(self, client: Client, token: str | None) -> None:
        self.client = client
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def tools(self) -> Any:
        return self.client.get("/api/v1/tools", headers=self.headers)

    def propose(self, body: Any, *, wait: float | None = None, raw: bytes | str | None = None) -> Any:
        path = "/api/v1/tool-calls" + (f"?wait={wait}" if wait else "")
        data = raw if raw is not None else json.dumps(body)
        return self.client.post(path, data=data, content_type="application/json", headers=self.headers)

    def get(self, call_id: str, *, wait: float | None = None) -> Any:
        return self.client.get(
            f"/api/v1/tool-calls/{call_id}" + (f"?wait={wait}" if wait else ""), headers=self.headers
        )


@pytest.fixture
def agent_api(make_agent: AgentFactory) -> Callable[..., AgentApi]:
    """Return a factory: agent_api(name, grants) → an AgentApi for a fresh agent."""

    def make(name: str = "support-agent", grants: dict[str, int] | None = None, owner: str | None = None) -> AgentApi:
        _, token = make_agent(name, grants, owner)
        return AgentApi(Client(), token)

    return make


def refund(
    valor: int = 10000, motivo: str = "produto_defeituoso", pedido: str = "PED-00000001", **extra: Any
) -> dict[str, Any]:
    """A proposal body for seed 000's refund tool."""
    return {
        "tool": "emitir_estorno",
        "arguments": {"pedido_id": pedido, "valor_centavos": valor, "motivo": motivo},
        **extra,
    }


def start_of_a_fresh_window() -> None:
    """Wait out the last seconds of a minute, so a test's rate-limited hits all land in one window."""
    if time.time() % 60 > 50:
        time.sleep(61 - time.time() % 60)
