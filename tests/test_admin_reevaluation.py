"""No rug pulls: a policy change made in admin re-judges pending calls, and approvals bind the tool version."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User

from approvals import decision_waits, lifecycle, tasks
from approvals.messages import Sent
from approvals.models import Status, ToolCall
from audit.models import Event
from tests.admin_client import AdminBrowser
from tests.conftest import AgentApi, refund
from toolcatalog.models import RiskTier, Tool


@pytest.fixture
def admin(db: None, settings: Any) -> AdminBrowser:
    # Proposals ask the demo services for a preview: a closed port makes that fail fast.
    settings.GATEHOUSE_DEMO_SERVICES_URL = "http://127.0.0.1:9"
    return AdminBrowser()


def reviewer(name: str) -> User:
    user = User.objects.create_user(name)
    user.user_permissions.add(Permission.objects.get(codename="review_toolcall"))
    return User.objects.get(pk=user.pk)  # a fresh instance: permissions are cached per instance


def propose(api: AgentApi, amount: int, key: str) -> ToolCall:
    response = api.propose(refund(amount, idempotency_key=key))
    assert response.status_code in (201, 202), response.json()
    return ToolCall.objects.get(pk=response.json()["id"])


def change_tool(admin: AdminBrowser, tool: Tool, on_commit: Any, **changes: Any) -> None:
    """Save the tool's admin form with `changes`, running what waits for the commit (as production does)."""
    with on_commit(execute=True):
        response = admin.submit(f"/admin/toolcatalog/tool/{tool.pk}/change/", changes, "tool_form")
    assert response.status_code == 302, response.context and response.context["adminform"].form.errors


def tier_pk(level: int) -> int:
    return RiskTier.objects.get(level=level).pk


def test_raising_a_rule_rejudges_pending_calls(
    admin: AdminBrowser, agent_api: Any, catalog: dict[str, Tool], django_capture_on_commit_callbacks: Any
) -> None:
    api, tool = agent_api(), catalog["emitir_estorno"]
    call = propose(api, 30000, "k-1")
    small = propose(api, 10000, "k-2")  # ran without approval: not pending, not touched
    assert (call.status, call.risk_tier, call.approvals_required) == ("pending_approval", 2, 1)
    change_tool(admin, tool, django_capture_on_commit_callbacks, **{"rules-0-tier": tier_pk(3)})  # above-autonomy
    call.refresh_from_db()
    version = Tool.objects.get(pk=tool.pk).version
    assert (call.status, call.risk_tier, call.approvals_required, call.tool_version) == (
        "pending_approval",
        3,
        2,
        version,
    )
    assert [r["rule"] for r in call.risk_reasons] == ["above-autonomy"]
    assert api.get(str(call.pk)).json()["risk_tier"] == 3
    event = Event.objects.get(action="call.reevaluated", call_id=call.pk)
    assert event.data["before"]["risk_tier"] == 2 and event.data["after"]["risk_tier"] == 3
    assert event.data["after"]["tool_version"] == version
    small.refresh_from_db()
    assert small.tool_version < version and not Event.objects.filter(action="call.reevaluated", call_id=small.pk)


def test_approvals_given_under_the_old_version_no_longer_count(
    admin: AdminBrowser, agent_api: Any, catalog: dict[str, Tool], django_capture_on_commit_callbacks: Any
) -> None:
    alice, bob = reviewer("alice"), reviewer("bob")
    api, tool = agent_api(), catalog["emitir_estorno"]
    call = propose(api, 600000, "k-1")  # tier 3: two reviewers
    assert lifecycle.approve(call, alice) is False  # one of two
    change_tool(admin, tool, django_capture_on_commit_callbacks, description="Refunds, now with a note.")
    call.refresh_from_db()
    assert call.tool_version == Tool.objects.get(pk=tool.pk).version
    assert call.approval_count() == 0
    assert lifecycle.approve(call, bob) is False  # alice's approval was of the old version
    assert call.status == Status.PENDING_APPROVAL
    assert lifecycle.approve(call, alice) is True  # a fresh approval under the new version counts
    assert call.approved_tool_version == call.tool_version


def test_a_call_the_new_schema_rejects_is_refused(
    admin: AdminBrowser, agent_api: Any, catalog: dict[str, Tool], django_capture_on_commit_callbacks: Any
) -> None:
    api, tool = agent_api(), catalog["emitir_estorno"]
    call = propose(api, 600000, "k-1")
    schema = json.loads(json.dumps(tool.input_schema))
    schema["properties"]["valor_centavos"]["maximum"] = 100000
    change_tool(admin, tool, django_capture_on_commit_callbacks, input_schema=json.dumps(schema))
    body = api.get(str(call.pk)).json()
    assert body["status"] == "refused"
    assert body["error"]["error"] == "invalid_arguments"
    assert body["error"]["errors"] == [{"field": "valor_centavos", "problem": "must be less than or equal to 100000"}]
    assert Event.objects.filter(action="call.refused_on_policy_change", call_id=call.pk).exists()


def test_a_call_now_above_the_agents_grant_is_refused(
    admin: AdminBrowser, agent_api: Any, catalog: dict[str, Tool], django_capture_on_commit_callbacks: Any
) -> None:
    api, tool = agent_api("support-agent", {"emitir_estorno": 2}), catalog["emitir_estorno"]
    call = propose(api, 30000, "k-1")
    change_tool(admin, tool, django_capture_on_commit_callbacks, **{"rules-0-tier": tier_pk(3)})
    body = api.get(str(call.pk)).json()
    assert (body["status"], body["error"]["error"], body["risk_tier"]) == ("refused", "permission_denied", 3)


def test_lowering_a_grant_in_agent_admin_refuses_pending_calls_above_it(
    admin: AdminBrowser, agent_api: Any, catalog: dict[str, Tool], django_capture_on_commit_callbacks: Any
) -> None:
    api = agent_api()
    call = propose(api, 30000, "k-1")
    with django_capture_on_commit_callbacks(execute=True):
        response = admin.submit(f"/admin/agents/agent/{call.agent_id}/change/", {"grants-0-max_tier": 1}, "agent_form")
    assert response.status_code == 302
    assert api.get(str(call.pk)).json()["error"]["error"] == "permission_denied"


def test_a_tier_change_in_admin_applies_to_pending_calls(
    admin: AdminBrowser, agent_api: Any, catalog: dict[str, Tool], django_capture_on_commit_callbacks: Any
) -> None:
    call = propose(agent_api(), 30000, "k-1")
    url = f"/admin/toolcatalog/risktier/{tier_pk(2)}/change/"
    with django_capture_on_commit_callbacks(execute=True):
        assert admin.submit(url, {"approvals_required": 2}, "risktier_form").status_code == 302
    call.refresh_from_db()
    assert (call.risk_tier, call.approvals_required) == (2, 2)


def test_a_refused_save_changes_nothing_and_announces_nothing(
    admin: AdminBrowser, agent_api: Any, catalog: dict[str, Tool], django_capture_on_commit_callbacks: Any
) -> None:
    call = propose(agent_api(), 30000, "k-1")
    tool = catalog["emitir_estorno"]
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = admin.submit(
            f"/admin/toolcatalog/tool/{tool.pk}/change/",
            {"rules-0-tier": tier_pk(3), "rules-1-condition": '{"type": "nope"}'},
            "tool_form",
        )
    assert response.status_code == 200 and callbacks == []
    call.refresh_from_db()
    assert (call.risk_tier, call.tool_version) == (2, tool.version)


def test_a_call_approved_under_an_older_version_goes_back_for_approval_at_execution(
    admin: AdminBrowser, agent_api: Any, catalog: dict[str, Tool], django_capture_on_commit_callbacks: Any
) -> None:
    alice = reviewer("alice")
    api, tool = agent_api(), catalog["emitir_estorno"]
    call = propose(api, 30000, "k-1")
    assert lifecycle.approve(call, alice) is True
    approved_version = call.approved_tool_version
    # The policy tightens after the approval, before a worker picks the call up.
    change_tool(admin, tool, django_capture_on_commit_callbacks, **{"rules-0-tier": tier_pk(3)})
    call.refresh_from_db()
    assert call.status == Status.APPROVED  # re-judging is for pending calls: execution checks the binding
    tasks.execute_call.run(call_id=str(call.pk), **asdict(Sent.of(call)))  # the worker's task body, in this process
    call.refresh_from_db()
    assert call.status == Status.PENDING_APPROVAL
    assert (call.risk_tier, call.approvals_required) == (3, 2)
    assert call.tool_version == Tool.objects.get(pk=tool.pk).version > approved_version
    assert call.approved_tool_version is None and call.result is None
    assert Event.objects.filter(action="call.returned_for_approval", call_id=call.pk).exists()
    assert not Event.objects.filter(action="call.executed", call_id=call.pk).exists()
    # /metrics' time to decision keeps the decision that was made: a histogram only grows.
    assert sum(decision_waits.waits().counts) == 1


def test_a_call_approved_under_an_older_version_that_the_new_policy_refuses_is_refused_at_execution(
    admin: AdminBrowser, agent_api: Any, catalog: dict[str, Tool], django_capture_on_commit_callbacks: Any
) -> None:
    api, tool = agent_api(), catalog["emitir_estorno"]
    call = propose(api, 30000, "k-1")
    assert lifecycle.approve(call, reviewer("alice")) is True
    schema = json.loads(json.dumps(tool.input_schema))
    schema["properties"]["valor_centavos"]["maximum"] = 20000
    change_tool(admin, tool, django_capture_on_commit_callbacks, input_schema=json.dumps(schema))
    tasks.execute_call.run(call_id=str(call.pk), **asdict(Sent.of(call)))
    body = api.get(str(call.pk)).json()
    assert (body["status"], body["error"]["error"], body["result"]) == ("refused", "invalid_arguments", None)
