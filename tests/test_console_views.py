"""The reviewer console through Django's test client, with CSRF enforced as a browser meets it."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from approvals.models import Decision, Status, ToolCall
from audit.models import Event
from tests.browser import Console, page_text
from tests.browser import propose_refund as propose
from tests.conftest import AgentApi

pytestmark = pytest.mark.django_db


# Access


@pytest.mark.parametrize("path", ["/", "/activity/", "/overview/", "/audit/", "/audit/export.csv"])
def test_anonymous_people_are_sent_to_log_in(path: str) -> None:
    response = Client().get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_an_agent_bearer_token_opens_no_console_page(support: AgentApi) -> None:
    call = propose(support, 30000, "k-bearer")
    for path in ("/", f"/calls/{call.pk}/", "/audit/", "/overview/"):
        response = Client().get(path, headers=support.headers)
        assert response.status_code == 302, path
    response = Client().post(f"/calls/{call.pk}/approve/", {}, headers=support.headers)
    assert response.status_code in (302, 403)
    call.refresh_from_db()
    assert call.status == Status.PENDING_APPROVAL


def test_a_signed_in_person_without_the_review_permission_gets_403(console: Callable[[str], Console]) -> None:
    mallory = console("mallory")
    assert mallory.get("/").status_code == 403
    assert mallory.get("/audit/").status_code == 403


def test_an_htmx_poll_after_the_session_ended_redirects_the_whole_page() -> None:
    response = Console().get("/", htmx=True)
    assert response.status_code == 200
    assert response["HX-Redirect"].startswith("/accounts/login/")


def test_login_then_logout_by_post(people: dict[str, User]) -> None:
    browser = Console()
    assert browser.get("/accounts/login/").status_code == 200
    response = browser.post("/accounts/login/", {"username": "alice", "password": "correct horse battery"})
    assert response.status_code == 302 and response["Location"] == "/"
    assert browser.get("/").status_code == 200
    assert browser.post("/accounts/logout/").status_code == 302
    assert browser.get("/").status_code == 302


def test_a_console_post_without_a_csrf_token_is_403(support: AgentApi, people: dict[str, User]) -> None:
    call = propose(support, 30000, "k-csrf")
    client = Client(enforce_csrf_checks=True)
    client.force_login(people["alice"])
    response = client.post(f"/calls/{call.pk}/approve/", {"arguments_hash": call.arguments_hash})
    assert response.status_code == 403
    call.refresh_from_db()
    assert call.status == Status.PENDING_APPROVAL and not call.decisions.exists()


# Queue


def test_the_queue_lists_highest_risk_then_oldest_with_the_amount_formatted(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    older = propose(support, 30000, "k-q1")
    big = propose(support, 800000, "k-q2")
    newer = propose(support, 25000, "k-q3")
    propose(support, 5000, "k-q4")  # tier 1: runs without approval, never queued
    html = page_text(console("alice").get("/"))
    positions = [html.index(f'data-call="{call.pk}"') for call in (big, older, newer)]
    assert positions == sorted(positions)
    assert "R$ 8.000,00" in html and "R$ 300,00" in html and "R$ 50,00" not in html
    assert "0 / 2" in html and "0 / 1" in html
    assert 'id="pending-badge"' in html and ">3</span>" in html


def test_queue_filters_narrow_and_the_htmx_refresh_keeps_them(
    support: AgentApi, agent_api: Callable[..., AgentApi], console: Callable[[str], Console]
) -> None:
    small = propose(support, 30000, "k-f1")
    big = propose(support, 800000, "k-f2")
    other = propose(agent_api("other-agent", {"emitir_estorno": 3}), 40000, "k-f3")
    alice = console("alice")
    html = page_text(alice.get("/?tier=3"))
    assert str(big.pk) in html and str(small.pk) not in html
    html = page_text(alice.get("/?agent=other-agent", htmx=True))
    assert str(other.pk) in html and str(small.pk) not in html
    assert "<html" not in html  # just the fragment
    assert 'hx-get="/?agent=other-agent"' in html  # the next poll asks for the same filter


def test_the_queue_costs_the_same_number_of_queries_for_3_or_60_calls(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    alice = console("alice")
    for index in range(3):
        propose(support, 30000 + index, f"k-few-{index}")
    with CaptureQueriesContext(connection) as few:
        assert alice.get("/").status_code == 200
    for index in range(57):
        propose(support, 900000 + index, f"k-many-{index}")
    with CaptureQueriesContext(connection) as many:
        assert alice.get("/").status_code == 200
    assert len(many) == len(few)
    assert len(few) <= 12


def test_activity_shows_decided_calls_and_who_decided(support: AgentApi, console: Callable[[str], Console]) -> None:
    call = propose(support, 30000, "k-act")
    alice = console("alice")
    alice.post(f"/calls/{call.pk}/reject/", {"reason": "duplicate request"})
    html = page_text(alice.get("/activity/"))
    assert str(call.pk) in html and "alice" in html and "Rejected" in html


# Decisions


def test_approving_a_tier_2_call_binds_the_arguments_seen(support: AgentApi, console: Callable[[str], Console]) -> None:
    call = propose(support, 30000, "k-a2")
    response = console("alice").approve(call, follow=True)
    call.refresh_from_db()
    assert call.status == Status.APPROVED
    assert call.approved_arguments_hash == call.arguments_hash
    assert "Approved. The call runs now." in page_text(response)


def test_an_htmx_approval_answers_with_the_call_fragment_and_a_trigger(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    call = propose(support, 30000, "k-htmx")
    response = console("bob").approve(call, htmx=True)
    assert response.status_code == 200
    assert "calls-changed" in json.loads(response["HX-Trigger"])
    html = page_text(response)
    assert html.lstrip().startswith('<div id="call-detail"') and "Approved. The call runs now." in html


def test_approving_arguments_other_than_those_shown_is_refused(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    call = propose(support, 30000, "k-stale")
    alice = console("alice")
    response = alice.post(f"/calls/{call.pk}/approve/", {"arguments_hash": "0" * 64}, follow=True)
    assert "The arguments changed since this page was drawn" in page_text(response)
    call.refresh_from_db()
    assert call.status == Status.PENDING_APPROVAL and not call.decisions.exists()


def test_rejecting_needs_a_reason_and_the_agent_receives_it(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    call = propose(support, 30000, "k-rej")
    alice = console("alice")
    response = alice.post(f"/calls/{call.pk}/reject/", {"reason": "   "}, follow=True)
    assert response.status_code == 200 and "Give a reason" in page_text(response)
    call.refresh_from_db()
    assert call.status == Status.PENDING_APPROVAL
    alice.post(f"/calls/{call.pk}/reject/", {"reason": "Order was already refunded."})
    body = support.get(str(call.pk)).json()
    assert body["status"] == "rejected"
    assert body["error"]["reason"] == "Order was already refunded."
    assert "Order was already refunded." in body["error"]["message"]


def test_four_eyes_needs_two_distinct_reviewers(support: AgentApi, console: Callable[[str], Console]) -> None:
    call = propose(support, 800000, "k-4eyes")
    alice = console("alice")
    first = page_text(alice.approve(call, follow=True))
    assert "Your approval is recorded (1 of 2)" in first
    again = page_text(alice.approve(call, follow=True))
    assert "You approved these arguments (1 of 2). Waiting for a second reviewer." in again
    call.refresh_from_db()
    assert call.status == Status.PENDING_APPROVAL
    assert Decision.objects.filter(call=call, kind="approve").count() == 1
    console("bob").approve(call)
    call.refresh_from_db()
    assert call.status == Status.APPROVED


def test_the_agents_owner_is_refused_with_a_message(
    agent_api: Callable[..., AgentApi], console: Callable[[str], Console]
) -> None:
    owned = agent_api("alices-agent", {"emitir_estorno": 3}, owner="alice")
    call = propose(owned, 30000, "k-owner")
    alice = console("alice")
    assert "You own the agent" in page_text(alice.get(f"/calls/{call.pk}/"))  # said before clicking
    response = alice.approve(call, follow=True)
    assert response.status_code == 200
    assert "You own the agent that proposed this call" in page_text(response)
    rejected = alice.post(f"/calls/{call.pk}/reject/", {"reason": "mine"}, follow=True)
    assert "You own the agent" in page_text(rejected)
    call.refresh_from_db()
    assert call.status == Status.PENDING_APPROVAL and not call.decisions.exists()


def test_a_reviewer_outside_the_tiers_approver_group_is_refused(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    call = propose(support, 800000, "k-group")
    response = console("carol").approve(call, follow=True)
    assert "may only be approved by members of “Senior reviewers”" in page_text(response)
    assert not call.decisions.exists()


def test_an_expired_call_cannot_be_approved_and_shows_as_expired(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    call = propose(support, 30000, "k-exp")
    ToolCall.objects.filter(pk=call.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    alice = console("alice")
    assert str(call.pk) not in page_text(alice.get("/"))
    response = alice.approve(call, follow=True)
    assert "approval window has passed" in page_text(response)
    call.refresh_from_db()
    assert call.status == Status.EXPIRED and not call.decisions.exists()
    assert Event.objects.filter(call_id=call.pk, action="call.expired").exists()


def test_deciding_a_call_already_decided_is_a_message_not_an_error(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    call = propose(support, 30000, "k-twice")
    console("alice").approve(call)
    response = console("bob").approve(call, follow=True)
    assert response.status_code == 200
    assert "no longer waiting for a decision" in page_text(response)
    assert Decision.objects.filter(call=call).count() == 1


# Edit


def edit_form(call: ToolCall, **changes: Any) -> dict[str, Any]:
    values = {**call.arguments, **changes}
    data = {name: value for name, value in values.items() if name != "idempotency_key"}
    data["motivo"] = json.dumps(data["motivo"])  # enum choices travel as JSON
    return {**data, "base_hash": call.arguments_hash}


def test_an_edit_shows_the_diff_and_the_new_tier_then_must_still_be_approved(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    call = propose(support, 80000, "k-edit")
    alice = console("alice")
    assert alice.get(f"/calls/{call.pk}/edit/").status_code == 200
    review = page_text(alice.post(f"/calls/{call.pk}/edit/", edit_form(call, valor_centavos=15000)))
    assert "R$ 800,00" in review and "R$ 150,00" in review
    assert 'id="new-tier">T1<' in review and "lower risk" in review and "Confirm edit" in review
    call.refresh_from_db()
    assert call.arguments["valor_centavos"] == 80000  # nothing saved before confirming
    confirmed = alice.post(f"/calls/{call.pk}/edit/", {**edit_form(call, valor_centavos=15000), "confirm": "1"})
    assert confirmed.status_code == 302
    call.refresh_from_db()
    assert call.arguments["valor_centavos"] == 15000 and call.original_arguments["valor_centavos"] == 80000
    assert (call.status, call.risk_tier, call.approvals_required) == (Status.PENDING_APPROVAL, 1, 1)
    assert Event.objects.filter(call_id=call.pk, action="call.arguments_edited").exists()
    page = page_text(alice.get(f"/calls/{call.pk}/"))
    assert "Edited by a reviewer" in page and "Agent proposed" in page
    console("bob").approve(call)
    call.refresh_from_db()
    assert call.status == Status.APPROVED and call.approved_arguments_hash == call.arguments_hash


def test_an_edit_that_breaks_the_schema_is_shown_and_not_saved(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    call = propose(support, 80000, "k-bad-edit")
    data = {**edit_form(call, valor_centavos=0), "confirm": "1"}
    response = console("alice").post(f"/calls/{call.pk}/edit/", data)
    assert response.status_code == 200
    assert "Must be at least R$ 0,01." in page_text(response)
    call.refresh_from_db()
    assert call.arguments["valor_centavos"] == 80000


def test_an_edit_above_the_agents_grant_is_refused(
    agent_api: Callable[..., AgentApi], people: dict[str, User], console: Callable[[str], Console]
) -> None:
    limited = agent_api("limited-agent", {"emitir_estorno": 2}, owner="admin")
    call = propose(limited, 30000, "k-grant")
    response = console("alice").post(
        f"/calls/{call.pk}/edit/", {**edit_form(call, valor_centavos=900000), "confirm": "1"}
    )
    assert "this agent may propose 'emitir_estorno' up to tier 2" in page_text(response)
    call.refresh_from_db()
    assert call.arguments["valor_centavos"] == 30000


def test_an_edit_based_on_arguments_that_changed_meanwhile_is_refused(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    call = propose(support, 80000, "k-race-edit")
    data = {**edit_form(call, valor_centavos=15000), "confirm": "1", "base_hash": "f" * 64}
    response = console("alice").post(f"/calls/{call.pk}/edit/", data)
    assert "The arguments changed while you were editing" in page_text(response)
    call.refresh_from_db()
    assert call.arguments["valor_centavos"] == 80000


# The call page


def test_the_call_page_shows_what_a_reviewer_needs(support: AgentApi, console: Callable[[str], Console]) -> None:
    first = propose(support, 30000, "k-p1", conversation_id="conv-7", step=1, call_index=0)
    call = propose(
        support,
        45000,
        "k-p2",
        conversation_id="conv-7",
        step=2,
        call_index=0,
        justification="Customer got a broken TV.",
    )
    preview = {
        "summary": "Refund R$ 450,00 on PED-00000001",
        "before": {"status": "paid", "refunded_centavos": 0},
        "after": {"status": "partially_refunded", "refunded_centavos": 45000},
    }
    ToolCall.objects.filter(pk=call.pk).update(preview=preview)
    html = page_text(console("alice").get(f"/calls/{call.pk}/"))
    assert "Customer got a broken TV." in html
    assert "Amount in cents (R$ 1,00 = 100)." in html  # the schema's description as a hint
    assert "R$ 450,00" in html and "partially_refunded" in html  # before → after
    assert "Compared with the agent's previous proposal" in html and str(first.pk) in html
    assert "above-autonomy" in html and "Refunds above R$ 200,00 need one reviewer." in html
    assert "call.proposed" in html  # the audit timeline
    assert f'hx-get="/calls/{call.pk}/live/?seen={call.arguments_hash}&version={call.tool_version}"' in html


def test_the_live_part_stops_polling_when_settled_and_reloads_after_an_edit(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    call = propose(support, 30000, "k-live")
    alice = console("alice")
    live = alice.get(f"/calls/{call.pk}/live/?seen={call.arguments_hash}", htmx=True)
    assert 'hx-trigger="every 4s"' in page_text(live)
    stale = alice.get(f"/calls/{call.pk}/live/?seen={'0' * 64}", htmx=True)
    assert stale["HX-Refresh"] == "true"
    alice.post(f"/calls/{call.pk}/reject/", {"reason": "no"})
    settled = page_text(alice.get(f"/calls/{call.pk}/live/?seen={call.arguments_hash}", htmx=True))
    assert "hx-trigger" not in settled.split('id="call-timeline"')[0]
    assert 'id="decision-panel" class="panel decide" aria-labelledby="decide-title" hx-swap-oob="true"' in settled


def test_an_unknown_call_is_404(console: Callable[[str], Console]) -> None:
    assert console("alice").get("/calls/00000000-0000-0000-0000-000000000000/").status_code == 404
