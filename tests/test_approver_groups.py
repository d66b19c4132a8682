"""Approver groups per tool and tier: who may approve, on every decision path, and what the others see."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.approvers import distinct_groups_covered
from approvals.models import Decision, Status, ToolCall
from audit.models import Event
from demo.management.commands.seed_demo import REVIEWERS_GROUP
from tests.browser import Console, page_text
from tests.browser import propose_refund as propose
from tests.conftest import AgentApi
from toolcatalog.models import ApproverGroup, Tool

pytestmark = pytest.mark.django_db


@pytest.fixture
def teams(people: dict[str, User]) -> dict[str, User]:
    """finance (dave, erin) approves refunds from tier 2; from tier 3 finance and risk (frank) both must."""
    finance, risk = Group.objects.create(name="finance"), Group.objects.create(name="risk")
    reviewers = Group.objects.get(name=REVIEWERS_GROUP)
    members = {"dave": finance, "erin": finance, "frank": risk}
    for name, team in members.items():
        User.objects.create_user(name, password="x").groups.add(reviewers, team)
    refunds = Tool.objects.get(name="emitir_estorno")
    ApproverGroup.objects.create(tool=refunds, min_tier=2, group=finance)
    ApproverGroup.objects.create(tool=refunds, min_tier=3, group=finance)
    ApproverGroup.objects.create(tool=refunds, min_tier=3, group=risk)
    return {user.username: user for user in User.objects.all()}


def as_(teams: dict[str, User], name: str) -> Console:
    return Console(teams[name])


def batch_approve(console: Console, *calls: ToolCall) -> str:
    """Approve `calls` from the queue in one batch (selected, confirmed); return the results fragment."""
    data: dict[str, Any] = {"action": "approve", "confirm": "1", "call": [str(c.pk) for c in calls]}
    for call in calls:
        data[f"seen-{call.pk}"] = f"{call.arguments_hash}:{call.tool_version}"
    return page_text(console.post("/batch/", data, htmx=True))


def test_a_non_member_cannot_approve_in_the_console_and_reads_why(support: AgentApi, teams: dict[str, User]) -> None:
    call = propose(support, 30000, "g-console")
    alice = as_(teams, "alice")  # a senior reviewer, but not in finance
    page = page_text(alice.get(f"/calls/{call.pk}/"))
    reason = "Calls of “emitir_estorno” at tier 2 may only be approved by members of “finance”."
    assert reason in page and 'id="approve-button"' not in page  # read-only, with the reason
    assert reason in page_text(alice.approve(call, follow=True))
    call.refresh_from_db()
    assert call.status == Status.PENDING_APPROVAL and not call.decisions.exists()
    as_(teams, "dave").approve(call)
    call.refresh_from_db()
    assert call.status == Status.APPROVED


def test_a_non_member_cannot_approve_in_a_batch(support: AgentApi, teams: dict[str, User]) -> None:
    call = propose(support, 30000, "g-batch")
    results = batch_approve(as_(teams, "carol"), call)
    assert "Refused: Calls of “emitir_estorno” at tier 2 may only be approved by members of “finance”." in results
    call.refresh_from_db()
    assert call.status == Status.PENDING_APPROVAL and not call.decisions.exists()


def test_a_non_member_cannot_approve_from_an_email_link(support: AgentApi, teams: dict[str, User]) -> None:
    from notifications import links

    call = propose(support, 30000, "g-mail")
    path = f"/notifications/decide/{links.token_for(call)}/"
    refused = page_text(as_(teams, "bob").post(path, {"decision": "approve"}, follow=True))
    assert "may only be approved by members of “finance”" in refused
    call.refresh_from_db()
    assert call.status == Status.PENDING_APPROVAL and not call.decisions.exists()
    as_(teams, "erin").post(path, {"decision": "approve"})
    call.refresh_from_db()
    assert call.status == Status.APPROVED


def test_a_two_group_four_eyes_tier_refuses_two_approvers_of_the_same_group(
    support: AgentApi, teams: dict[str, User]
) -> None:
    call = propose(support, 800000, "g-four-eyes")
    assert call.risk_tier == 3 and call.approvals_required == 2
    as_(teams, "dave").approve(call)
    second = page_text(as_(teams, "erin").approve(call, follow=True))
    assert "needs its approvals from different groups (“finance” or “risk”)" in second
    call.refresh_from_db()
    assert call.status == Status.PENDING_APPROVAL
    assert list(Decision.objects.filter(call=call, kind="approve").values_list("reviewer_name", flat=True)) == ["dave"]
    as_(teams, "frank").approve(call)
    call.refresh_from_db()
    assert call.status == Status.APPROVED


def test_the_tier_group_still_decides_for_a_tool_that_names_none(
    agent_api: Callable[..., AgentApi], teams: dict[str, User]
) -> None:
    Tool.objects.get(name="emitir_estorno").approver_groups.all().delete()
    support = agent_api("support-agent", {"emitir_estorno": 3}, owner="admin")
    call = propose(support, 800000, "g-tier")
    refused = page_text(as_(teams, "carol").approve(call, follow=True))
    assert "Calls at tier 3 may only be approved by members of “Senior reviewers”." in refused


def test_the_queue_separates_yours_to_decide_from_waiting_on_others(support: AgentApi, teams: dict[str, User]) -> None:
    call = propose(support, 30000, "g-queue")
    carol = page_text(as_(teams, "carol").get("/"))
    others = carol.split('id="queue-others"', 1)[1]
    assert str(call.pk) in others and "Only members of its approver group may approve it." in others
    assert 'id="queue-yours"' not in carol and "Nothing on this page is yours to decide." in carol
    dave = page_text(as_(teams, "dave").get("/"))
    yours = dave.split('id="queue-yours"', 1)[1]
    assert f'value="{call.pk}"' in yours and 'id="queue-others"' not in dave


def test_the_queue_page_runs_a_fixed_number_of_queries_with_groups(support: AgentApi, teams: dict[str, User]) -> None:
    for index in range(3):
        propose(support, 30000 + index, f"g-fixed-{index}")
    dave = as_(teams, "dave")
    with CaptureQueriesContext(connection) as few:
        assert dave.get("/").status_code == 200
    for index in range(3, 15):
        propose(support, 800000 + index, f"g-fixed-{index}")
    with CaptureQueriesContext(connection) as many:
        assert dave.get("/").status_code == 200
    assert len(many) == len(few)


@pytest.mark.parametrize(
    ("approvers", "covered"),
    [
        ([], 0),
        ([{1}], 1),
        ([{1}, {1}], 1),
        ([{1}, {2}], 2),
        ([{1, 2}, {1}], 2),  # the first stands for 2, the second for 1
        ([{1, 2}, {1, 2}, {1}], 2),
    ],
)
def test_distinct_groups_covered_is_a_matching(approvers: list[set[int]], covered: int) -> None:
    assert distinct_groups_covered(approvers) == covered


def test_an_admin_adds_an_approver_group_inline_on_the_tool_with_an_audit_event(catalog: dict[str, Any]) -> None:
    from tests.admin_client import AdminBrowser

    tool, finance = catalog["emitir_estorno"], Group.objects.create(name="finance")
    admin = AdminBrowser()
    url = f"/admin/toolcatalog/tool/{tool.pk}/change/"
    added = {"approver_groups-TOTAL_FORMS": 1, "approver_groups-0-min_tier": 2, "approver_groups-0-group": finance.pk}
    response = admin.submit(url, added, "tool_form")
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert list(ApproverGroup.objects.filter(tool=tool).values_list("min_tier", "group__name")) == [(2, "finance")]
    event = Event.objects.filter(action="admin.tool.changed").latest("seq")
    assert event.data["after"]["approver_groups"] == [{"min_tier": 2, "group": "finance"}]
    assert event.data["before"]["approver_groups"] == []
