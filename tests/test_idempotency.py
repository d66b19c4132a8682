"""Idempotency under real concurrency: threads, separate PostgreSQL connections, one row."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from approvals.models import ToolCall
from audit.chain import first_break
from audit.models import Event
from audit.sequencer import seal_all
from tests.conftest import refund

pytestmark = pytest.mark.django_db(transaction=True)


def run_concurrently(count: int, action: Callable[[int], Any]) -> list[Any]:
    """Run `action(i)` in `count` threads released at the same moment; return the results."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count

    def worker(index: int) -> None:
        barrier.wait()
        try:
            results[index] = action(index)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def post(token: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = Client().post(
        "/api/v1/tool-calls",
        data=json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )
    return response.status_code, response.json()


def test_fifty_concurrent_identical_proposals_make_one_call(make_agent) -> None:
    _, token = make_agent("support-agent", {"emitir_estorno": 3})
    body = refund(30000, idempotency_key="k-concurrent")
    results = run_concurrently(50, lambda _: post(token, body))
    statuses = sorted(status for status, _ in results)
    assert all(status < 500 for status in statuses), statuses
    assert statuses.count(202) == 1 and statuses.count(200) == 49
    assert len({payload["id"] for _, payload in results}) == 1
    assert ToolCall.objects.filter(idempotency_key="k-concurrent").count() == 1
    seal_all()
    assert first_break() is None


def test_concurrent_proposals_with_different_arguments_under_one_key_conflict(make_agent) -> None:
    _, token = make_agent("support-agent", {"emitir_estorno": 3})
    results = run_concurrently(20, lambda i: post(token, refund(30000 + i, idempotency_key="k-race")))
    statuses = sorted(status for status, _ in results)
    assert statuses.count(202) == 1 and statuses.count(409) == 19
    assert ToolCall.objects.count() == 1


def test_keys_are_scoped_per_agent(make_agent) -> None:
    _, first = make_agent("agent-one", {"emitir_estorno": 3})
    _, second = make_agent("agent-two", {"emitir_estorno": 3})
    assert post(first, refund(30000, idempotency_key="shared"))[0] == 202
    assert post(second, refund(30001, idempotency_key="shared"))[0] == 202
    assert ToolCall.objects.filter(idempotency_key="shared").count() == 2


def test_concurrent_writers_keep_the_audit_chain_intact(make_agent) -> None:
    _, token = make_agent("support-agent", {"emitir_estorno": 3})
    run_concurrently(30, lambda i: post(token, refund(30000, idempotency_key=f"k-chain-{i}")))
    assert ToolCall.objects.count() == 30
    seal_all()
    assert not Event.objects.filter(seq__isnull=True).exists()
    assert first_break() is None
