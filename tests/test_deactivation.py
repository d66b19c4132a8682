"""Deactivating an agent withdraws its calls that nothing has started: audited, compare-and-set, said on the page."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection, transaction
from django.test import Client

from agents.models import Agent
from approvals import lifecycle
from approvals.models import Status, ToolCall
from audit.chain import first_break
from audit.models import Event
from demo.models import Refund
from tests.admin_client import AdminBrowser
from tests.browser import Console, page_text
from tests.conftest import AgentApi, refund
from tests.processes import CeleryWorker, wait_until


def reviewer(name: str = "rita") -> User:
    user = User.objects.create_user(name)
    user.user_permissions.add(Permission.objects.get(codename="review_toolcall"))
    return User.objects.get(pk=user.pk)  # a fresh instance: permissions are cached per instance


def propose(api: AgentApi, amount: int, key: str, pedido: str = "PED-00000004") -> ToolCall:
    response = api.propose(refund(amount, pedido=pedido, idempotency_key=key))
    assert response.status_code in (201, 202), response.content
    return ToolCall.objects.get(pk=response.json()["id"])


def deactivate(agent: Agent) -> None:
    """Deactivate the agent through its model's save path."""
    agent = Agent.objects.get(pk=agent.pk)
    agent.active = False
    agent.save()


def withdrawn(call: ToolCall) -> bool:
    call.refresh_from_db()
    return call.status == Status.REFUSED and call.error["error"] == "agent_deactivated"


@pytest.fixture
def quiet_downstream(settings: Any) -> None:
    # Proposals ask the demo services for a preview: a closed port makes that fail fast.
    settings.GATEHOUSE_DEMO_SERVICES_URL = "http://127.0.0.1:9"


@pytest.mark.django_db
def test_the_deactivate_action_withdraws_pending_and_approved_calls_and_leaves_the_rest(
    make_agent: Callable[..., tuple[Agent, str]], quiet_downstream: None
) -> None:
    agent, token = make_agent("support-agent")
    _, other_token = make_agent("billing-agent")
    api, other_api = AgentApi(Client(), token), AgentApi(Client(), other_token)
    pending = propose(api, 30000, "k-pending")
    approved = propose(api, 40000, "k-approved")
    assert lifecycle.approve(approved, reviewer()) is True
    rejected = propose(api, 50000, "k-rejected")
    lifecycle.reject(rejected, reviewer("rex"), "no")
    others = propose(other_api, 30000, "k-other")

    admin = AdminBrowser()
    admin.get("/admin/agents/agent/")
    response = admin.post("/admin/agents/agent/", {"action": "deactivate", "_selected_action": [agent.pk]})
    assert response.status_code == 302

    assert withdrawn(pending) and withdrawn(approved)
    assert pending.finished_at is not None
    assert Event.objects.get(call_id=pending.pk, action="call.withdrawn").data["was"] == "pending_approval"
    assert Event.objects.get(call_id=approved.pk, action="call.withdrawn").data["was"] == "approved"
    rejected.refresh_from_db()
    others.refresh_from_db()
    assert rejected.status == Status.REJECTED and others.status == Status.PENDING_APPROVAL
    assert first_break() is None


@pytest.mark.django_db
def test_unticking_active_on_the_agents_form_withdraws_its_pending_call(
    make_agent: Callable[..., tuple[Agent, str]], quiet_downstream: None
) -> None:
    agent, token = make_agent("support-agent")
    call = propose(AgentApi(Client(), token), 30000, "k-form")
    response = AdminBrowser().submit(f"/admin/agents/agent/{agent.pk}/change/", {}, "agent_form", drop=("active",))
    assert response.status_code == 302
    assert withdrawn(call)


@pytest.mark.django_db
def test_a_call_a_worker_already_claimed_is_not_withdrawn(
    make_agent: Callable[..., tuple[Agent, str]], quiet_downstream: None
) -> None:
    agent, token = make_agent("support-agent")
    call = propose(AgentApi(Client(), token), 30000, "k-claimed")
    assert lifecycle.approve(call, reviewer()) is True
    assert lifecycle.claim(call, timedelta(seconds=60)) is True  # what a worker's delivery does first
    deactivate(agent)
    call.refresh_from_db()
    assert call.status == Status.EXECUTING and call.error is None
    assert not Event.objects.filter(call_id=call.pk, action="call.withdrawn").exists()


@pytest.mark.django_db
def test_the_call_page_says_why_a_withdrawn_call_will_not_run_and_approving_it_is_refused(
    make_agent: Callable[..., tuple[Agent, str]], quiet_downstream: None
) -> None:
    agent, token = make_agent("support-agent")
    call = propose(AgentApi(Client(), token), 30000, "k-page")
    deactivate(agent)
    rita = Console(reviewer())
    page = page_text(rita.get(f"/calls/{call.pk}/"))
    assert "agent_deactivated" in page
    assert "The agent that proposed this call was deactivated, so the call was withdrawn: it will not run." in page
    assert 'id="approve-button"' not in page
    assert "no longer waiting for a decision" in page_text(rita.approve(call, follow=True))


@pytest.mark.django_db
def test_a_call_of_an_inactive_agent_that_the_withdrawal_missed_cannot_be_approved(
    make_agent: Callable[..., tuple[Agent, str]], quiet_downstream: None
) -> None:
    agent, token = make_agent("support-agent")
    call = propose(AgentApi(Client(), token), 30000, "k-missed")
    Agent.objects.filter(pk=agent.pk).update(active=False)  # as if proposed while the deactivation committed
    rita = Console(reviewer())
    assert "was deactivated" in page_text(rita.get(f"/calls/{call.pk}/"))
    assert "was deactivated" in page_text(rita.approve(call, follow=True))
    call.refresh_from_db()
    assert call.status == Status.PENDING_APPROVAL and not call.decisions.exists()


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_does_not_execute_an_approved_call_withdrawn_before_it_started(
    start_worker: Callable[..., CeleryWorker], demo_services: str, make_agent: Callable[..., tuple[Agent, str]]
) -> None:
    agent, token = make_agent("support-agent")
    _, control_token = make_agent("billing-agent")
    call = propose(AgentApi(Client(), token), 30000, "k-worker", pedido="PED-00000004")
    control = propose(AgentApi(Client(), control_token), 30000, "k-control", pedido="PED-00000006")
    rita = reviewer()
    assert lifecycle.approve(call, rita) is True  # its message waits in the broker: no worker runs yet
    deactivate(agent)
    assert lifecycle.approve(control, rita) is True  # queued behind it: once this one ran, the worker took both

    worker = start_worker()
    wait_until(lambda: ToolCall.objects.filter(pk=control.pk, status=Status.SUCCEEDED).exists(), timeout=30)
    assert worker.log().count("Task approvals.tasks.execute_call[") >= 2, worker.log()

    assert withdrawn(call)
    assert not Event.objects.filter(call_id=call.pk, action="call.execution_started").exists()
    assert not Refund.objects.filter(call_id=call.pk).exists()
    assert Refund.objects.filter(call_id=control.pk).count() == 1
    assert first_break() is None


@pytest.mark.django_db(transaction=True)
def test_an_approval_in_progress_leaves_the_agents_row_free_for_a_deactivation(
    make_agent: Callable[..., tuple[Agent, str]], quiet_downstream: None
) -> None:
    agent, token = make_agent("support-agent")
    call = propose(AgentApi(Client(), token), 30000, "k-lock")
    holding, release = threading.Event(), threading.Event()

    def approve_in_progress() -> None:
        try:
            with transaction.atomic():
                lifecycle.locked(call)  # what approve, reject and edit hold until they commit
                holding.set()
                release.wait(timeout=30)
        finally:
            connection.close()

    thread = threading.Thread(target=approve_in_progress)
    thread.start()
    try:
        assert holding.wait(timeout=30)
        with transaction.atomic():  # NOWAIT: raises at once if the approval held the agent's row
            assert Agent.objects.select_for_update(nowait=True).filter(pk=agent.pk).exists()
    finally:
        release.set()
        thread.join(timeout=30)
