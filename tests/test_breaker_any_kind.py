"""The circuit breaker also opens on M consecutive failures of any kinds for one agent and tool."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from agents import breakers
from agents.models import CircuitBreaker
from audit.models import Event
from tests.conftest import AgentApi, refund

INVALID = {"motivo": "x"}  # invalid_arguments: not one of the schema's reasons
TOO_HIGH = {"valor": 30000}  # permission_denied: tier 2, above this agent's grant


@pytest.fixture
def looper(agent_api: Any) -> AgentApi:
    return agent_api("looper", {"emitir_estorno": 1})


def alternate_failures(api: AgentApi, count: int, prefix: str = "f") -> list[tuple[int, str]]:
    """Propose `count` failing calls, alternating invalid_arguments and permission_denied; return (status, error)."""
    results = []
    for n in range(count):
        response = api.propose(refund(idempotency_key=f"{prefix}-{n}", **(INVALID if n % 2 == 0 else TOO_HIGH)))
        results.append((response.status_code, response.json()["error"]))
    return results


def test_thirty_alternating_failure_kinds_open_the_breaker_at_the_any_kind_threshold(
    looper: AgentApi, settings: Any
) -> None:
    settings.GATEHOUSE_BREAKER_THRESHOLD = 5
    settings.GATEHOUSE_BREAKER_ANY_KIND_THRESHOLD = 10
    results = alternate_failures(looper, 30)
    assert results[:10] == [(422, "invalid_arguments"), (403, "permission_denied")] * 5
    assert results[10:] == [(429, "circuit_open")] * 20
    opened = Event.objects.get(action="circuit.opened")
    assert (opened.data["consecutive_any_kind"], opened.data["consecutive_failures"]) == (10, 1)
    # A valid call is refused too until a reviewer resets the breaker.
    assert looper.propose(refund(idempotency_key="ok")).json()["error"] == "circuit_open"


def test_a_success_restarts_the_count_of_any_kind(looper: AgentApi, settings: Any) -> None:
    settings.GATEHOUSE_BREAKER_ANY_KIND_THRESHOLD = 10
    alternate_failures(looper, 9, "a")
    assert looper.propose(refund(idempotency_key="ok")).status_code == 201
    assert [status for status, _ in alternate_failures(looper, 9, "b")] == [422, 403] * 4 + [422]
    assert CircuitBreaker.objects.get().opened_at is None


def test_one_kind_still_opens_at_its_own_lower_threshold(looper: AgentApi, settings: Any) -> None:
    settings.GATEHOUSE_BREAKER_THRESHOLD = 3
    settings.GATEHOUSE_BREAKER_ANY_KIND_THRESHOLD = 10
    for n in range(3):
        assert looper.propose(refund(idempotency_key=f"s-{n}", **INVALID)).status_code == 422
    assert looper.propose(refund(idempotency_key="s-3", **INVALID)).json()["error"] == "circuit_open"


def test_a_reset_breaker_counts_any_kind_afresh(looper: AgentApi, settings: Any) -> None:
    settings.GATEHOUSE_BREAKER_ANY_KIND_THRESHOLD = 4
    alternate_failures(looper, 4, "a")
    assert breakers.reset(CircuitBreaker.objects.select_related("agent", "tool").get(), by="alice")
    assert [status for status, _ in alternate_failures(looper, 4, "b")] == [422, 403, 422, 403]
    assert alternate_failures(looper, 1, "c") == [(429, "circuit_open")]


def test_the_overview_shows_the_failures_of_any_kind_that_opened_the_breaker(looper: AgentApi, settings: Any) -> None:
    settings.GATEHOUSE_BREAKER_ANY_KIND_THRESHOLD = 4
    alternate_failures(looper, 4)
    reviewer = User.objects.create_user("carol")
    reviewer.user_permissions.add(Permission.objects.get(codename="review_toolcall"))
    console = Client(enforce_csrf_checks=True)
    console.force_login(reviewer)
    html = console.get("/overview/").content.decode()
    assert "<code>permission_denied</code> (1)</td>" in html
    assert '<td class="num">4</td>' in html
