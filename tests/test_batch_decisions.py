"""Batch decisions from the queue through Django's test client (CSRF enforced): confirm, bind, report each call."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection

from approvals.models import Decision, Status, ToolCall
from audit.models import Event
from tests.browser import Console, page_text
from tests.browser import propose_refund as propose
from tests.conftest import AgentApi
from tests.test_notifications_slack import edit

pytestmark = pytest.mark.django_db


def selection(action: str, *calls: ToolCall, confirm: bool = True, **extra: str) -> dict[str, Any]:
    """The form the queue sends: the selected calls, each with the hash and version its row showed."""
    data: dict[str, Any] = {"action": action, "call": [str(call.pk) for call in calls], **extra}
    if confirm:
        data["confirm"] = "1"
    for call in calls:
        data[f"seen-{call.pk}"] = f"{call.arguments_hash}:{call.tool_version}"
    return data


def test_the_queue_offers_a_checkbox_bound_to_each_row(support: AgentApi, console: Callable[[str], Console]) -> None:
    call = propose(support, 30000, "b-row")
    page = page_text(console("alice").get("/"))
    assert f'name="call" value="{call.pk}"' in page
    assert f'name="seen-{call.pk}" value="{call.arguments_hash}:{call.tool_version}"' in page


def test_the_first_post_asks_to_confirm_and_decides_nothing(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    calls = [propose(support, 30000 + n, f"b-ask-{n}") for n in range(3)]
    page = page_text(console("alice").post("/batch/", selection("approve", *calls, confirm=False), htmx=True))
    assert "Approve 3 calls?" in page and 'id="batch-confirm-button"' in page
    for call in calls:  # the confirm step carries each row's binding on, unchanged
        assert f'name="seen-{call.pk}" value="{call.arguments_hash}:{call.tool_version}"' in page
    assert not Decision.objects.filter(call__in=calls).exists()


def test_approving_a_batch_approves_each_bound_to_its_own_arguments(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    calls = [propose(support, 30000 + n, f"b-many-{n}") for n in range(4)]
    response = console("alice").post("/batch/", selection("approve", *calls), htmx=True)
    assert "calls-changed" in response["HX-Trigger"]
    results = page_text(response)
    assert results.count("Approved. The call runs now.") == 4
    for call in calls:
        call.refresh_from_db()
        assert call.status in (Status.APPROVED, Status.EXECUTING, Status.SUCCEEDED, Status.FAILED)
        assert call.approved_arguments_hash == call.arguments_hash
        (approved,) = Event.objects.filter(call_id=call.pk, action="call.approved")
        assert approved.data["arguments_hash"] == call.arguments_hash
    assert len({call.arguments_hash for call in calls}) == 4


def test_a_call_edited_after_the_page_loaded_is_left_out_and_named(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    kept, edited = propose(support, 30000, "b-kept"), propose(support, 45000, "b-edited")
    form = selection("approve", kept, edited)  # as the queue showed them
    edit(console("bob"), edited, valor_centavos=44000)
    results = page_text(console("alice").post("/batch/", form, htmx=True))
    row = results.split(f'data-call="{edited.pk}"', 1)[1].split("</tr>", 1)[0]
    assert "Left out: its arguments changed since the queue was drawn." in row
    edited.refresh_from_db()
    assert edited.status == Status.PENDING_APPROVAL
    assert not Decision.objects.filter(call=edited, kind="approve").exists()
    kept.refresh_from_db()
    assert kept.status != Status.PENDING_APPROVAL and kept.approved_arguments_hash == kept.arguments_hash


def test_a_batch_applies_every_rule_of_a_single_decision(
    agent_api: Callable[..., AgentApi], support: AgentApi, console: Callable[[str], Console]
) -> None:
    mine = agent_api("alices-agent", {"emitir_estorno": 3}, owner="alice")
    owned, four_eyes = propose(mine, 30000, "b-owned"), propose(support, 800000, "b-four")
    results = page_text(console("alice").post("/batch/", selection("approve", owned, four_eyes), htmx=True))
    assert "Refused: You own the agent that proposed this call" in results
    assert "Your approval is recorded (1 of 2); another reviewer must approve before it runs." in results
    four_eyes.refresh_from_db()
    assert four_eyes.status == Status.PENDING_APPROVAL
    assert not owned.decisions.exists()


def test_rejecting_a_batch_needs_a_reason_and_gives_it_to_each_agent(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    calls = [propose(support, 30000 + n, f"b-reject-{n}") for n in range(2)]
    alice = console("alice")
    asked = page_text(alice.post("/batch/", selection("reject", *calls), htmx=True))
    assert "Give a reason: each agent receives it." in asked and 'id="batch-reason"' in asked
    assert not Decision.objects.filter(call__in=calls).exists()
    results = page_text(alice.post("/batch/", selection("reject", *calls, reason="duplicates"), htmx=True))
    assert results.count("Rejected. The agent receives your reason.") == 2
    for call in calls:
        call.refresh_from_db()
        assert call.status == Status.REJECTED and call.error["reason"] == "duplicates"


def test_a_plain_browser_is_sent_back_to_the_queue_with_a_line_per_call(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    calls = [propose(support, 30000 + n, f"b-plain-{n}") for n in range(2)]
    alice = console("alice")
    confirm = alice.post("/batch/", selection("approve", *calls, confirm=False))
    assert confirm.status_code == 200 and "Approve 2 calls?" in page_text(confirm)
    response = alice.post("/batch/", selection("approve", *calls))
    assert response.status_code == 302 and response["Location"] == "/"
    page = page_text(alice.get("/"))
    for call in calls:
        assert f"emitir_estorno {str(call.pk)[:8]}: Approved. The call runs now." in page


def test_a_batch_without_a_csrf_token_is_refused(support: AgentApi, console: Callable[[str], Console]) -> None:
    call = propose(support, 30000, "b-csrf")
    alice = console("alice")
    response = alice.client.post("/batch/", selection("approve", call))
    assert response.status_code == 403
    assert not call.decisions.exists()


@pytest.mark.django_db(transaction=True)
def test_overlapping_batches_sent_at_once_decide_each_call_once(
    people: dict[str, User], agent_api: Callable[..., AgentApi]
) -> None:
    support = agent_api("support-agent", {"emitir_estorno": 3}, owner="admin")
    calls = [propose(support, 30000 + n, f"b-race-{n}") for n in range(5)]
    sessions = [Console(people["alice"]), Console(people["bob"]), Console(people["carol"])]
    barrier = threading.Barrier(len(sessions))
    statuses: list[int] = []

    def send(session: Console) -> None:
        barrier.wait()
        try:
            statuses.append(session.post("/batch/", selection("approve", *calls), htmx=True).status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=send, args=(session,)) for session in sessions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses == [200, 200, 200]
    for call in calls:
        call.refresh_from_db()
        assert call.status == Status.APPROVED
        assert Decision.objects.filter(call=call, kind="approve").count() == 1
        assert Event.objects.filter(call_id=call.pk, action="call.approved").count() == 1
