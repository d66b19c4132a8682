"""The calls' tally: PostgreSQL's triggers keep it with the calls whatever moves them, folding keeps it small,
the overview's pending and per-state figures read it, and its portable twin counts the same."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from approvals import execution, tally
from approvals.models import CallTally, ToolCall
from approvals.states import Status
from tests.browser import Console, propose_refund
from tests.conftest import AgentApi
from tests.test_console_context import read, section


def live_counts(**filters: object) -> Counter[str]:
    return Counter(ToolCall.objects.filter(**filters).values_list("status", flat=True))


def test_the_tally_follows_calls_proposed_moved_backdated_and_deleted(support: AgentApi) -> None:
    calls = [propose_refund(support, 30000 + n, f"tally-{n}") for n in range(5)]
    assert tally.calls_by_status() == live_counts() == Counter({Status.PENDING_APPROVAL: 5})

    ToolCall.objects.filter(pk=calls[0].pk).update(status=Status.REJECTED)
    ToolCall.objects.filter(pk__in=[calls[1].pk, calls[2].pk]).update(status=Status.APPROVED, decided_at=timezone.now())
    ToolCall.objects.filter(pk=calls[3].pk).update(expires_at=timezone.now())  # no change of state: no tally row
    ToolCall.objects.filter(pk=calls[3].pk).update(risk_tier=3)  # re-judged under a stricter policy
    forty_days_ago = timezone.now() - timedelta(days=40)
    ToolCall.objects.filter(pk=calls[4].pk).update(created_at=forty_days_ago)
    assert tally.calls_by_status() == live_counts()

    assert tally.calls_by_tier(Status.PENDING_APPROVAL) == Counter(
        ToolCall.objects.filter(status=Status.PENDING_APPROVAL).values_list("risk_tier", flat=True)
    )
    assert tally.calls_by_tier(Status.PENDING_APPROVAL)[3] == 1

    recent = timezone.localdate() - timedelta(days=29)
    assert tally.calls_by_status(since=recent) == live_counts(created_at__date__gte=recent)
    assert tally.calls_by_status(since=recent)[Status.PENDING_APPROVAL] == 1  # the backdated one is out

    ToolCall.objects.filter(pk=calls[0].pk).delete()
    assert tally.calls_by_status() == live_counts()


def test_the_portable_twin_counts_what_the_tally_sums(support: AgentApi, settings: Any) -> None:
    calls = [propose_refund(support, 30000 + n, f"twin-{n}") for n in range(4)]
    ToolCall.objects.filter(pk=calls[0].pk).update(status=Status.REJECTED)
    ToolCall.objects.filter(pk=calls[1].pk).update(risk_tier=3)
    ToolCall.objects.filter(pk=calls[2].pk).update(created_at=timezone.now() - timedelta(days=40))
    recent = timezone.localdate() - timedelta(days=29)
    figures = [
        tally.calls_by_status(),
        tally.calls_by_status(since=recent),
        tally.calls_by_tier(Status.PENDING_APPROVAL),
    ]
    assert CallTally.objects.exists()

    settings.GATEHOUSE_POSTGRESQL_STORE = False
    CallTally.objects.all().delete()  # the twin does not read the tally

    assert [tally.calls_by_status(), tally.calls_by_status(since=recent)] == figures[:2]
    assert tally.calls_by_tier(Status.PENDING_APPROVAL) == figures[2]
    assert figures[1] == Counter({Status.PENDING_APPROVAL: 2, Status.REJECTED: 1})


def test_folding_leaves_one_row_per_day_and_state_and_every_sum_as_it_was(support: AgentApi) -> None:
    calls = [propose_refund(support, 30000 + n, f"fold-{n}") for n in range(6)]
    for call in calls[:4]:
        ToolCall.objects.filter(pk=call.pk).update(status=Status.EXPIRED)
    ToolCall.objects.filter(pk=calls[0].pk).update(created_at=timezone.now() - timedelta(days=3))
    before = tally.calls_by_status()

    assert tally.fold(limit=4) > 0  # several transactions of at most four rows
    assert tally.fold() > 0  # what each of those left, folded together
    assert tally.fold() == 0

    assert tally.calls_by_status() == before == live_counts()
    keys = list(CallTally.objects.values_list("day", "status"))
    assert len(keys) == len(set(keys)) == 3  # today's pending and expired, and three days ago's expired


@pytest.mark.django_db(transaction=True)
def test_calls_moved_by_many_writers_while_the_tally_is_folded_are_all_counted(support: AgentApi) -> None:
    calls = [propose_refund(support, 30000 + n, f"race-{n}") for n in range(60)]
    stop = threading.Event()

    def move(share: list[ToolCall]) -> None:
        try:
            for call in share:
                with transaction.atomic():
                    ToolCall.objects.filter(pk=call.pk).update(status=Status.APPROVED)
                    ToolCall.objects.filter(pk=call.pk).update(status=Status.EXECUTING)
                ToolCall.objects.filter(pk=call.pk).update(status=Status.SUCCEEDED)
        finally:
            connection.close()

    def fold_until_stopped() -> None:
        try:
            while not stop.is_set():
                tally.fold(limit=7)
        finally:
            connection.close()

    folder = threading.Thread(target=fold_until_stopped)
    writers = [threading.Thread(target=move, args=(calls[n::3],)) for n in range(3)]
    folder.start()
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    stop.set()
    folder.join()

    assert live_counts() == Counter({Status.SUCCEEDED: 60})
    assert tally.calls_by_status() == live_counts()
    tally.fold()
    assert list(CallTally.objects.values_list("status", "calls")) == [(Status.SUCCEEDED, 60)]


def test_the_overview_counts_pending_calls_inside_their_window_and_calls_by_state_from_the_tally(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    calls = [propose_refund(support, 30000 + n, f"overview-{n}") for n in range(4)]
    ToolCall.objects.filter(pk=calls[0].pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    ToolCall.objects.filter(pk=calls[1].pk).update(status=Status.REJECTED)

    text = read(console("alice").get("/overview/"))
    assert "2pending now" in text  # the overdue one waits for the sweeper, not for a reviewer
    assert "Pending approval 3" in section(text, "Calls by state", "Time to decision")

    assert execution.sweep()["expired"] == 1
    text = read(console("alice").get("/overview/"))
    assert "2pending now" in text
    by_state = section(text, "Calls by state", "Time to decision")
    assert "Pending approval 2" in by_state and "Expired 1" in by_state and "Rejected 1" in by_state
