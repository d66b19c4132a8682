"""The reviewer pages' figures where they are read for scale: the overview's medians from one sample of
decisions, its outcomes and decided count from the review-outcome index, a call's resource history by index."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from approvals.models import ToolCall
from approvals.states import Status
from tests.browser import Console, propose_refund
from tests.conftest import AgentApi
from tests.test_console_context import read, section


def decided(call: ToolCall, status: str, proposed: datetime, waited: timedelta | None, **fields: int) -> None:
    """Leave a call as a decision `waited` after its proposal at `proposed` would (never decided: None)."""
    decided_at = proposed + waited if waited is not None else None
    ToolCall.objects.filter(pk=call.pk).update(status=status, created_at=proposed, decided_at=decided_at, **fields)


def test_the_overview_takes_every_median_from_the_same_decisions(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    two_days_ago = timezone.now() - timedelta(days=2)
    three_days_ago = timezone.now() - timedelta(days=3)
    for n, minutes in enumerate((10, 20, 30)):
        call = propose_refund(support, 30000 + n, f"tier2-{n}")
        decided(call, Status.SUCCEEDED, two_days_ago, timedelta(minutes=minutes), risk_tier=2, approvals_required=1)
    for n, hours in enumerate((1, 3)):
        call = propose_refund(support, 60000 + n, f"tier3-{n}")
        decided(call, Status.REJECTED, three_days_ago, timedelta(hours=hours), risk_tier=3, approvals_required=2)
    text = read(console("alice").get("/overview/"))
    # Over all five: 10m, 20m, 30m, 1h, 3h.
    assert re.search(r"30m\s*median time to decision \(5 decided\)", text)
    wait = section(text, "Time to decision", "Open circuit breakers")
    assert "T2 3 20m" in wait and "T3 2 2h 00m" in wait
    assert f"{timezone.localdate(two_days_ago):%Y-%m-%d}: 20m" in wait
    assert f"{timezone.localdate(three_days_ago):%Y-%m-%d}: 2h 00m" in wait


def test_the_overview_counts_people_decisions_and_expiries_not_autonomous_or_pending_calls(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    an_hour_ago = timezone.now() - timedelta(hours=1)
    approved, rejected, expired, autonomous = (propose_refund(support, 30000 + n, f"mix-{n}") for n in range(4))
    decided(approved, Status.SUCCEEDED, an_hour_ago, timedelta(minutes=5), approvals_required=1)
    decided(rejected, Status.REJECTED, an_hour_ago, timedelta(minutes=5), approvals_required=1)
    decided(expired, Status.EXPIRED, an_hour_ago, None, approvals_required=1)
    # Approved by the policy itself: stamped decided at its proposal, but no person decided it.
    decided(autonomous, Status.SUCCEEDED, an_hour_ago, timedelta(0), approvals_required=0, risk_tier=0)
    propose_refund(support, 40000, "mix-pending")
    text = read(console("alice").get("/overview/"))
    assert "(2 decided)" in text
    assert "emitir_estorno 1 1 1 50%" in section(text, "Share approved", "Calls by state")


def test_a_tool_with_only_pending_calls_has_no_decisions_to_show(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    propose_refund(support, 30000, "only-pending")
    text = read(console("alice").get("/overview/"))
    assert "No reviewed calls yet." in section(text, "Reviewer decisions per tool", "Calls by state")
    assert "(0 decided)" in text


def overview_queries(alice: Console) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert alice.get("/overview/").status_code == 200
    return len(captured)


def test_the_overview_runs_as_many_queries_for_many_decisions_as_for_one(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    alice = console("alice")
    first = propose_refund(support, 30000, "count-0")
    decided(first, Status.SUCCEEDED, timezone.now() - timedelta(hours=1), timedelta(minutes=1), approvals_required=1)
    alice.get("/overview/")  # the session and permission caches warm up as on any later visit
    one = overview_queries(alice)
    for n in range(1, 6):
        call = propose_refund(support, 30000 + n, f"count-{n}")
        proposed = timezone.now() - timedelta(days=n)
        decided(call, Status.REJECTED, proposed, timedelta(minutes=n), risk_tier=2 + n % 2, approvals_required=1)
    assert overview_queries(alice) == one


def test_a_calls_resource_history_keeps_only_equal_values_not_values_that_contain_it(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    same = propose_refund(support, 21000, "contain-same", pedido="PED-00000031")
    larger = propose_refund(support, 22000, "contain-larger", pedido="PED-00000032")
    call = propose_refund(support, 30000, "contain-call", pedido="PED-00000033")
    # Containment alone would take {"n": 1, "m": 2} for {"n": 1}: the page must not.
    for other, value in ((same, {"n": 1}), (larger, {"n": 1, "m": 2}), (call, {"n": 1})):
        ToolCall.objects.filter(pk=other.pk).update(arguments={**other.arguments, "pedido_id": value})
    text = read(console("alice").get(f"/calls/{call.pk}/"))
    history = section(text, "Other calls on pedido_id", "Audit timeline")
    assert "R$ 210,00" in history
    assert "R$ 220,00" not in history
    assert "R$ 300,00" not in history
