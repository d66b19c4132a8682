"""A database connection lost mid-request: a clean 503, nothing half-written, and recovery."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from django.db import connection

from approvals.models import ToolCall
from audit.models import Event
from tests.conftest import refund

pytestmark = pytest.mark.django_db(transaction=True)

# Holds the proposal's transaction open just after the call row is written (at its
# audit event), so the test can kill the connection at the worst possible moment.
SLOW_AUDIT_TRIGGER = """
CREATE FUNCTION test_slow_audit() RETURNS trigger AS $$
BEGIN
    IF NEW.data->>'justification' = 'slow please' THEN PERFORM pg_sleep(20); END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER test_slow_audit BEFORE INSERT ON audit_event
    FOR EACH ROW EXECUTE FUNCTION test_slow_audit();
"""


@pytest.fixture
def slow_audit_insert() -> Iterator[None]:
    with connection.cursor() as cursor:
        cursor.execute(SLOW_AUDIT_TRIGGER)
    yield
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER test_slow_audit ON audit_event; DROP FUNCTION test_slow_audit();")


def sleeping_backend(timeout: float = 10) -> int:
    """Return the pid of the backend sleeping in the trigger."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pid FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND pid <> pg_backend_pid()")
            row = cursor.fetchone()
        if row:
            return row[0]
        time.sleep(0.05)
    raise AssertionError("the request never reached the database")


def test_a_dropped_connection_gives_503_and_leaves_nothing_half_written(
    live_server, make_agent, slow_audit_insert: None
) -> None:
    _, token = make_agent("support-agent", {"emitir_estorno": 3})
    headers = {"Authorization": f"Bearer {token}"}
    url = f"{live_server.url}/api/v1/tool-calls"
    responses: list[httpx.Response] = []
    body = refund(30000, idempotency_key="k-dropped", justification="slow please")
    request = threading.Thread(target=lambda: responses.append(httpx.post(url, json=body, headers=headers, timeout=30)))
    request.start()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [sleeping_backend()])
    request.join(timeout=30)

    assert responses[0].status_code == 503
    assert responses[0].json()["error"] == "service_unavailable"
    assert responses[0].headers["Retry-After"] == "1"
    assert not ToolCall.objects.exists()
    assert not Event.objects.filter(action="call.proposed").exists()

    retry = httpx.post(url, json={**body, "justification": "retry"}, headers=headers, timeout=30)
    assert retry.status_code == 202
    assert ToolCall.objects.count() == 1
