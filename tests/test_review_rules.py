"""Review rules a reviewer meets on the call page: an editor proposes, one approval counts once, the tool
version binds, and "then open the next call"."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar

import pytest
from django.contrib.auth.models import Group, User

from approvals.models import Decision, Status, ToolCall
from audit.models import Event
from tests.browser import REVIEWER_PASSWORD, Console, page_text
from tests.browser import propose_refund as propose
from tests.conftest import AgentApi
from tests.processes import CeleryWorker, http_server, wait_until
from toolcatalog.models import Tool

pytestmark = pytest.mark.django_db


@pytest.fixture
def dora(people: dict[str, User]) -> Console:
    """A third senior reviewer, so a four-eyes call edited by one senior can still be approved by two others."""
    user = User.objects.create_user("dora", password=REVIEWER_PASSWORD)
    user.groups.add(*Group.objects.filter(name__in=["Reviewers", "Senior reviewers"]))
    return Console(User.objects.get(pk=user.pk))


def edit(reviewer: Console, call: ToolCall, **changes: Any) -> None:
    """Confirm an edit of the call's arguments, as the edit page's form does."""
    call.refresh_from_db()
    values = {name: value for name, value in {**call.arguments, **changes}.items() if name != "idempotency_key"}
    values["motivo"] = json.dumps(values["motivo"])  # enum choices travel as JSON
    response = reviewer.post(f"/calls/{call.pk}/edit/", {**values, "base_hash": call.arguments_hash, "confirm": "1"})
    assert response.status_code == 302, page_text(response)
    call.refresh_from_db()


def events(call: ToolCall, action: str) -> int:
    return Event.objects.filter(call_id=call.pk, action=action).count()


def approvals_of(call: ToolCall) -> int:
    return Decision.objects.filter(call=call, kind="approve").count()


def approve_button(html: str) -> bool:
    return 'id="approve-button"' in html


# An edit is a proposal: its editor does not approve it.


def test_the_editor_of_a_calls_arguments_cannot_approve_them_and_another_reviewer_can(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    call = propose(support, 419697, "k-edit-own")
    alice, bob = console("alice"), console("bob")
    edit(alice, call, valor_centavos=150000)
    assert call.risk_tier == 2 and call.status == Status.PENDING_APPROVAL

    page = page_text(alice.get(f"/calls/{call.pk}/"))
    assert "You proposed them, so another reviewer approves them." in page  # said when the edit is saved
    assert not approve_button(page)
    assert "You edited these arguments, so you proposed them: another reviewer must approve them." in page
    refused = page_text(alice.approve(call, follow=True))
    assert "You edited these arguments" in refused
    call.refresh_from_db()
    assert call.status == Status.PENDING_APPROVAL
    assert approvals_of(call) == 0 and events(call, "call.approval_recorded") == 0

    assert approve_button(page_text(bob.get(f"/calls/{call.pk}/")))
    assert "Approved. The call runs now." in page_text(bob.approve(call, follow=True))
    call.refresh_from_db()
    assert call.status == Status.APPROVED and call.approved_arguments_hash == call.arguments_hash


def test_an_edited_four_eyes_call_needs_two_reviewers_other_than_its_editor(
    support: AgentApi, console: Callable[[str], Console], dora: Console
) -> None:
    call = propose(support, 800000, "k-edit-4eyes")
    alice, bob = console("alice"), console("bob")
    edit(alice, call, valor_centavos=700000)
    assert (call.risk_tier, call.approvals_required) == (3, 2)
    assert "two other reviewers must approve them" in page_text(alice.approve(call, follow=True))
    bob.approve(call)
    call.refresh_from_db()
    assert call.status == Status.PENDING_APPROVAL and call.approval_count() == 1
    dora.approve(call)
    call.refresh_from_db()
    assert call.status == Status.APPROVED
    assert sorted(Decision.objects.filter(call=call, kind="approve").values_list("reviewer_name", flat=True)) == [
        "bob",
        "dora",
    ]


def test_an_approval_given_before_its_giver_edited_the_call_back_to_those_arguments_no_longer_counts(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    call = propose(support, 800000, "k-edit-back")
    alice, bob = console("alice"), console("bob")
    alice.approve(call)
    assert call.approval_count() == 1
    edit(bob, call, valor_centavos=700000)
    edit(alice, call, valor_centavos=800000)  # back to the arguments alice approved: now she proposed them
    assert call.approval_count() == 0
    assert "You edited these arguments" in page_text(alice.get(f"/calls/{call.pk}/"))


# One approval counts once, and the page says it waits for others.


def test_a_reviewer_who_approved_sees_waiting_for_a_second_reviewer_and_no_approve_button(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    call = propose(support, 800000, "k-wait")
    alice = console("alice")
    alice.approve(call)
    page = page_text(alice.get(f"/calls/{call.pk}/"))
    assert not approve_button(page)
    assert "You approved these arguments (1 of 2). Waiting for a second reviewer." in page
    assert 'class="notice notice-info"' in page  # information, not a warning or an error
    assert approve_button(page_text(console("bob").get(f"/calls/{call.pk}/")))


def test_a_repeated_approval_writes_no_event_and_shows_no_success(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    call = propose(support, 800000, "k-repeat")
    alice = console("alice")
    first = page_text(alice.approve(call, follow=True))
    assert "Your approval is recorded (1 of 2)" in first and "notice-success" in first
    recorded = Event.objects.filter(call_id=call.pk).count()

    for htmx in (False, True):
        again = page_text(alice.approve(call, htmx=htmx, follow=not htmx))
        assert "notice-success" not in again
        assert "Waiting for a second reviewer." in again

    assert Event.objects.filter(call_id=call.pk).count() == recorded
    assert events(call, "call.approval_recorded") == 1 and approvals_of(call) == 1
    call.refresh_from_db()
    assert call.status == Status.PENDING_APPROVAL


# The approval binds the tool version the reviewer's page showed.


def page_fields(html: str) -> dict[str, str]:
    """Return the hidden fields of the page's approval form."""
    form = html.split('id="approve-button"')[0].rsplit("<form", 1)[1]
    return dict(re.findall(r'name="(arguments_hash|tool_version)" value="([^"]*)"', form))


def save_tool(tool: Tool, on_commit: Any, **changes: Any) -> int:
    """Save the tool as admin does (a new version), run what waits for the commit; return the new version."""
    with on_commit(execute=True):
        tool = Tool.objects.get(pk=tool.pk)
        for name, value in changes.items():
            setattr(tool, name, value)
        tool.save()
    return Tool.objects.get(pk=tool.pk).version


def test_the_approval_form_carries_the_arguments_hash_and_the_tool_version(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    call = propose(support, 30000, "k-form")
    fields = page_fields(page_text(console("alice").get(f"/calls/{call.pk}/")))
    assert fields == {"arguments_hash": call.arguments_hash, "tool_version": str(call.tool_version)}


def test_an_approval_from_a_page_drawn_before_the_tool_changed_is_refused(
    support: AgentApi,
    console: Callable[[str], Console],
    catalog: dict[str, Tool],
    django_capture_on_commit_callbacks: Any,
) -> None:
    call = propose(support, 30000, "k-v-old")
    alice = console("alice")
    drawn = page_fields(page_text(alice.get(f"/calls/{call.pk}/")))
    tool = catalog["emitir_estorno"]
    new_version = save_tool(tool, django_capture_on_commit_callbacks, executor_ref="/demo/api/refunds-v2/")
    call.refresh_from_db()
    assert call.tool_version == new_version > int(drawn["tool_version"])  # re-judged under the new version
    assert call.arguments_hash == drawn["arguments_hash"]  # the arguments alone did not change

    response = alice.post(f"/calls/{call.pk}/approve/", drawn, follow=True)
    assert "The tool “emitir_estorno” changed (now version" in page_text(response)
    call.refresh_from_db()
    assert call.status == Status.PENDING_APPROVAL and approvals_of(call) == 0

    alice.post(f"/calls/{call.pk}/approve/", page_fields(page_text(alice.get(f"/calls/{call.pk}/"))))
    call.refresh_from_db()
    assert call.status == Status.APPROVED and call.approved_tool_version == new_version


def test_an_approval_without_the_tool_version_is_refused(support: AgentApi, console: Callable[[str], Console]) -> None:
    call = propose(support, 30000, "k-v-none")
    response = console("alice").post(f"/calls/{call.pk}/approve/", {"arguments_hash": call.arguments_hash}, follow=True)
    assert "changed (now version" in page_text(response)
    call.refresh_from_db()
    assert call.status == Status.PENDING_APPROVAL and approvals_of(call) == 0


def test_the_live_part_reloads_the_page_when_the_tool_version_changes(
    support: AgentApi,
    console: Callable[[str], Console],
    catalog: dict[str, Tool],
    django_capture_on_commit_callbacks: Any,
) -> None:
    call = propose(support, 30000, "k-v-live")
    alice = console("alice")
    page = page_text(alice.get(f"/calls/{call.pk}/"))
    poll = f"/calls/{call.pk}/live/?seen={call.arguments_hash}&version={call.tool_version}"
    assert f'hx-get="{poll}"' in page
    assert "HX-Refresh" not in alice.get(poll, htmx=True)
    save_tool(catalog["emitir_estorno"], django_capture_on_commit_callbacks, description="Refund, second edition.")
    assert alice.get(poll, htmx=True)["HX-Refresh"] == "true"


# "Then open the next call waiting for me"


def test_approving_with_next_opens_the_oldest_call_the_reviewer_may_still_decide(
    support: AgentApi, agent_api: Callable[..., AgentApi], console: Callable[[str], Console]
) -> None:
    alice = console("alice")
    owned = propose(agent_api("alices-agent", {"emitir_estorno": 3}, owner="alice"), 30000, "k-n-owned")
    approved_already = propose(support, 800000, "k-n-approved")
    alice.approve(approved_already)
    edited_by_her = propose(support, 80000, "k-n-edited")
    edit(alice, edited_by_her, valor_centavos=70000)
    expected = propose(support, 30000, "k-n-expected")
    propose(support, 30000, "k-n-newer")
    current = propose(support, 40000, "k-n-current")
    assert {owned.pk, approved_already.pk, edited_by_her.pk}.isdisjoint({expected.pk, current.pk})

    page = page_text(alice.get(f"/calls/{current.pk}/"))
    assert 'name="next"' in page and "Then open the next call waiting for me" in page
    seen = page_fields(page)
    response = alice.post(f"/calls/{current.pk}/approve/", {**seen, "next": "1"})
    assert response.status_code == 302 and response["Location"] == f"/calls/{expected.pk}/?next=1"
    current.refresh_from_db()
    assert current.status == Status.APPROVED
    following = page_text(alice.get(response["Location"]))
    assert "Approved. The call runs now." in following
    assert 'id="open-next" checked' in following  # kept ticked while working through the queue

    htmx = alice.post(f"/calls/{expected.pk}/approve/", {**page_fields(following), "next": "1"}, htmx=True)
    assert htmx["HX-Redirect"].startswith("/calls/") and str(expected.pk) not in htmx["HX-Redirect"]


def test_approving_with_next_skips_calls_of_a_tier_the_reviewer_may_not_approve(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    carol = console("carol")  # a reviewer, not a senior: tier 3 is not hers to approve
    propose(support, 800000, "k-n-senior-only")
    expected = propose(support, 30000, "k-n-tier-2")
    current = propose(support, 40000, "k-n-carol")
    seen = page_fields(page_text(carol.get(f"/calls/{current.pk}/")))
    response = carol.post(f"/calls/{current.pk}/approve/", {**seen, "next": "1"})
    assert response["Location"] == f"/calls/{expected.pk}/?next=1"


def test_approving_with_next_when_nothing_is_left_returns_to_the_queue(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    call = propose(support, 30000, "k-n-last")
    alice = console("alice")
    seen = page_fields(page_text(alice.get(f"/calls/{call.pk}/")))
    response = alice.post(f"/calls/{call.pk}/approve/", {**seen, "next": "1"})
    assert response.status_code == 302 and response["Location"] == "/"
    assert "No other call is waiting for your approval." in page_text(alice.get("/"))


class NewEndpoint(BaseHTTPRequestHandler):
    """The endpoint an admin points the tool at: records each execution (not previews or verifications)."""

    executed: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.rstrip("/").endswith("/refunds-v2"):
            self.executed.append(self.headers.get("Idempotency-Key", ""))
        body = json.dumps({"confirmed": True, "observed": {}, "summary": "", "before": None, "after": None})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_stale_click_runs_nothing_and_the_new_endpoint_runs_only_after_an_approval_of_the_new_version(
    start_worker: Callable[..., CeleryWorker], support: AgentApi, console: Callable[[str], Console]
) -> None:
    call = propose(support, 30000, "k-v-worker")
    alice = console("alice")
    drawn = page_fields(page_text(alice.get(f"/calls/{call.pk}/")))
    NewEndpoint.executed = []
    start_worker()
    with http_server(NewEndpoint) as downstream:
        tool = Tool.objects.get(name="emitir_estorno")
        tool.executor_ref = f"{downstream}/refunds-v2"
        tool.save()  # committed: the policy change is announced and the call re-judged under the new version
        call.refresh_from_db()
        assert call.tool_version == tool.version

        assert "changed (now version" in page_text(alice.post(f"/calls/{call.pk}/approve/", drawn, follow=True))
        live = alice.get(f"/calls/{call.pk}/live/?seen={drawn['arguments_hash']}&version={drawn['tool_version']}")
        assert live["HX-Refresh"] == "true"  # the open page reloads and shows the new version

        alice.post(f"/calls/{call.pk}/approve/", page_fields(page_text(alice.get(f"/calls/{call.pk}/"))))
        wait_until(lambda: ToolCall.objects.filter(pk=call.pk, status=Status.SUCCEEDED).exists(), timeout=30)
    # One execution, the one approved under the version that names this endpoint.
    assert NewEndpoint.executed == [f"gatehouse-call-{call.pk}"]
    call.refresh_from_db()
    assert call.approved_tool_version == tool.version
    assert events(call, "call.approval_recorded") == 1
