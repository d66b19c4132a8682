"""Agents in admin: a token shown exactly once, rotation and deactivation effective at once, audited grants."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from agents.models import Agent, Grant
from audit.models import Event
from tests.admin_client import AdminBrowser
from tests.conftest import AgentApi
from toolcatalog.models import Tool

TOKEN = re.compile(r'<code class="gh-token" data-agent="([^"]+)">([^<]+)</code>')


@pytest.fixture
def admin(db: None) -> AdminBrowser:
    return AdminBrowser()


def tokens_shown(response: Any) -> dict[str, str]:
    """Return {agent name: token} as the page shows them."""
    assert response.status_code == 200
    return dict(TOKEN.findall(response.content.decode()))


def tools_seen(token: str) -> Any:
    return AgentApi(Client(), token).tools()


def test_creating_an_agent_shows_its_token_exactly_once(admin: AdminBrowser, catalog: dict[str, Tool]) -> None:
    changes = {
        "name": "billing-bot",
        "description": "Refunds billing errors.",
        "max_calls_per_conversation": 20,
        "grants-TOTAL_FORMS": 1,
        "grants-0-tool": catalog["emitir_estorno"].pk,
        "grants-0-max_tier": 2,
    }
    response = admin.submit("/admin/agents/agent/add/", changes, "agent_form")
    shown = tokens_shown(response)
    assert list(shown) == ["billing-bot"]
    token = shown["billing-bot"]
    assert "no-store" in response["Cache-Control"]
    agent = Agent.objects.get(name="billing-bot")
    assert Agent.authenticate(token) == agent
    listed = tools_seen(token)
    assert listed.status_code == 200
    assert [tool["name"] for tool in listed.json()["tools"]] == ["emitir_estorno"]
    # Never again: not on the agent's page, not in its list, not in the audit log.
    for url in (f"/admin/agents/agent/{agent.pk}/change/", "/admin/agents/agent/"):
        page = admin.get(url).content.decode()
        assert token not in page and agent.token_hint in page
    event = Event.objects.get(action="admin.agent.added")
    assert event.data["after"]["grants"] == {"emitir_estorno": 2}
    assert event.data["after"]["token_hint"] == token[:10]
    assert "token_hash" not in event.data["after"]
    assert not any(token in str(e.data) for e in Event.objects.all())


def test_rotating_a_token_stops_the_old_one_at_once(admin: AdminBrowser, make_agent: Any) -> None:
    agent, old = make_agent("support-agent", {"emitir_estorno": 3})
    assert tools_seen(old).status_code == 200
    url = f"/admin/agents/agent/{agent.pk}/rotate-token/"
    assert url in admin.get(f"/admin/agents/agent/{agent.pk}/change/").content.decode()
    assert "stops working at once" in admin.get(url).content.decode()
    new = tokens_shown(admin.post(url, {}))["support-agent"]
    assert new != old
    refused = tools_seen(old)
    assert refused.status_code == 401
    assert refused.json()["error"] == "unauthorized"
    assert tools_seen(new).status_code == 200
    event = Event.objects.get(action="admin.agent.token_rotated")
    assert (event.actor_kind, event.actor_name, event.agent_name) == ("admin", "root", "support-agent")
    assert (event.data["before"]["token_hint"], event.data["after"]["token_hint"]) == (old[:10], new[:10])


def test_rotating_needs_a_post_with_the_csrf_token(admin: AdminBrowser, make_agent: Any) -> None:
    agent, old = make_agent()
    url = f"/admin/agents/agent/{agent.pk}/rotate-token/"
    assert admin.client.post(url, {}).status_code == 403  # no CSRF token: refused, nothing rotated
    assert tools_seen(old).status_code == 200


def test_the_rotate_action_rotates_every_selected_agent(admin: AdminBrowser, make_agent: Any) -> None:
    (a, token_a), (b, token_b) = make_agent("a-agent"), make_agent("b-agent")
    admin.get("/admin/agents/agent/")
    response = admin.post("/admin/agents/agent/", {"action": "rotate_tokens", "_selected_action": [a.pk, b.pk]})
    shown = tokens_shown(response)
    assert sorted(shown) == ["a-agent", "b-agent"]
    assert tools_seen(token_a).status_code == 401 and tools_seen(token_b).status_code == 401
    assert all(tools_seen(token).status_code == 200 for token in shown.values())
    assert Event.objects.filter(action="admin.agent.token_rotated").count() == 2


def test_deactivating_an_agent_refuses_its_next_request(admin: AdminBrowser, make_agent: Any) -> None:
    agent, token = make_agent()
    assert tools_seen(token).status_code == 200
    response = admin.submit(f"/admin/agents/agent/{agent.pk}/change/", {}, "agent_form", drop=("active",))
    assert response.status_code == 302
    assert tools_seen(token).status_code == 401
    event = Event.objects.get(action="admin.agent.changed")
    assert event.data["changed"] == ["active"]
    assert (event.data["before"]["active"], event.data["after"]["active"]) == (True, False)
    # Reactivating lets the same token in again: it was never rotated.
    admin.submit(f"/admin/agents/agent/{agent.pk}/change/", {"active": "on"}, "agent_form")
    assert tools_seen(token).status_code == 200


def test_the_deactivate_action_refuses_the_next_request(admin: AdminBrowser, make_agent: Any) -> None:
    agent, token = make_agent()
    admin.get("/admin/agents/agent/")
    admin.post("/admin/agents/agent/", {"action": "deactivate", "_selected_action": [agent.pk]})
    assert tools_seen(token).status_code == 401
    assert Event.objects.get(action="admin.agent.changed").data["after"]["active"] is False


def test_grants_are_edited_inline_and_audited(admin: AdminBrowser, make_agent: Any, catalog: dict[str, Tool]) -> None:
    agent, token = make_agent("support-agent", {"emitir_estorno": 3})
    changes = {
        "grants-0-max_tier": 1,
        "grants-TOTAL_FORMS": 2,
        "grants-1-tool": catalog["get_order_status"].pk,
        "grants-1-max_tier": 0,
    }
    response = admin.submit(f"/admin/agents/agent/{agent.pk}/change/", changes, "agent_form")
    assert response.status_code == 302
    assert dict(Grant.objects.filter(agent=agent).values_list("tool__name", "max_tier")) == {
        "emitir_estorno": 1,
        "get_order_status": 0,
    }
    assert sorted(t["name"] for t in tools_seen(token).json()["tools"]) == ["emitir_estorno", "get_order_status"]
    event = Event.objects.get(action="admin.agent.changed")
    assert event.data["changed"] == ["grants"]
    assert event.data["before"]["grants"] == {"emitir_estorno": 3}
    assert event.data["after"]["grants"] == {"emitir_estorno": 1, "get_order_status": 0}


AUDIT_URLS = ["/admin/audit/event/add/", "/admin/audit/event/{pk}/change/", "/admin/audit/event/{pk}/delete/"]


def test_the_audit_log_cannot_be_added_changed_or_deleted_in_admin(admin: AdminBrowser, make_agent: Any) -> None:
    make_agent()  # writes an event
    event = Event.objects.order_by("seq").first()
    stored = (event.seq, event.hash, event.data)
    add, change, delete = (url.format(pk=event.pk) for url in AUDIT_URLS)
    assert admin.get(add).status_code == 403
    assert admin.post(add, {"seq": 99, "action": "forged", "actor_kind": "admin", "actor_name": "x"}).status_code == 403
    page = admin.get(change)
    assert page.status_code == 200  # readable…
    assert 'name="_save"' not in page.content.decode() and "/delete/" not in page.content.decode()
    assert admin.post(change, {"action": "forged", "actor_name": "x"}).status_code == 403  # …never editable
    assert admin.get(delete).status_code == 403
    assert admin.post(delete, {"post": "yes"}).status_code == 403
    changelist = admin.get("/admin/audit/event/")
    assert "delete_selected" not in changelist.content.decode()
    response = admin.post("/admin/audit/event/", {"action": "delete_selected", "_selected_action": [event.pk]})
    assert response.status_code in (200, 302)
    event.refresh_from_db()
    assert (event.seq, event.hash, event.data) == stored
    assert Event.objects.filter(action="forged").count() == 0


def test_calls_and_decisions_are_read_only_in_admin(admin: AdminBrowser, agent_api: Any) -> None:
    from tests.conftest import refund

    api = agent_api()
    call_id = api.propose(refund(30000, idempotency_key="k-1")).json()["id"]
    assert admin.get("/admin/approvals/toolcall/add/").status_code == 403
    page = admin.get(f"/admin/approvals/toolcall/{call_id}/change/")
    assert page.status_code == 200 and 'class="gh-json"' in page.content.decode()
    assert admin.post(f"/admin/approvals/toolcall/{call_id}/change/", {"status": "approved"}).status_code == 403
    assert admin.post(f"/admin/approvals/toolcall/{call_id}/delete/", {"post": "yes"}).status_code == 403
    assert admin.get("/admin/approvals/decision/add/").status_code == 403
    assert api.get(call_id).json()["status"] == "pending_approval"


def test_who_may_review_is_audited_too(admin: AdminBrowser) -> None:
    from django.contrib.auth.models import Group, Permission

    reviewers = Group.objects.create(name="Reviewers")
    reviewers.permissions.add(Permission.objects.get(codename="review_toolcall"))
    carol = AdminBrowser("carol", superuser=False).user
    response = admin.submit(f"/admin/auth/user/{carol.pk}/change/", {"groups": reviewers.pk}, "user_form")
    assert response.status_code == 302
    event = Event.objects.get(action="admin.user.changed")
    assert (event.data["before"]["groups"], event.data["after"]["groups"]) == ([], ["Reviewers"])
    assert "password" not in event.data["after"]


def test_a_password_change_in_admin_is_audited_without_the_password(admin: AdminBrowser) -> None:
    carol = AdminBrowser("carol", superuser=False).user
    new_password = "another-long-password-9"
    url = f"/admin/auth/user/{carol.pk}/password/"
    response = admin.submit(url, {"password1": new_password, "password2": new_password}, drop=("_save",))
    assert response.status_code == 302
    event = Event.objects.get(action="admin.user.changed")
    assert event.data["message"] == [{"changed": {"fields": ["password"]}}]
    assert new_password not in str(event.data) and "password" not in event.data["after"]
