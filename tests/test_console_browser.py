"""The reviewer console in Debian's Chromium against the live server, with a real Celery worker.

Every effect is checked where it lands: the refunds ledger of the demo service,
the agent's own API, the decisions and the audit log.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import Page, expect

from agents.provisioning import create_or_update_agent
from approvals import lifecycle
from approvals.models import Decision, ToolCall
from audit.models import Event
from demo.models import Order, Refund
from tests.conftest import AgentApi, refund
from tests.processes import CeleryWorker

pytestmark = [pytest.mark.browser, pytest.mark.worker]

RUN_TIMEOUT = 20_000  # ms: a worker claims, executes and verifies a refund well within this


@pytest.fixture
def support(celery_worker: CeleryWorker, demo_services: str, people: dict[str, User], agent_api: Any) -> AgentApi:
    """The support agent (owned by admin), proposing against the seeded demo orders."""
    return agent_api("support-agent", {"emitir_estorno": 3, "get_order_status": 0}, owner="admin")


def propose(api: AgentApi, valor: int, pedido: str, key: str | None, **extra: Any) -> str:
    body = refund(valor, pedido=pedido, **extra)
    if key:
        body["idempotency_key"] = key
    response = api.propose(body)
    assert response.status_code == 202, response.content
    return response.json()["id"]


def status_of(page: Page) -> Any:
    return page.locator("#call-live .status")


def actions(call_id: str, action: str) -> int:
    return Event.objects.filter(call_id=call_id, action=action).count()


def test_a_reviewer_approves_a_300_refund_and_sees_it_succeed_without_a_reload(support: AgentApi, log_in: Any) -> None:
    call_id = propose(support, 30000, "PED-00000004", "b-approve", justification="Customer returned the item.")
    page = log_in("alice")
    row = page.locator(f'tr[data-call="{call_id}"]')
    expect(row).to_contain_text("R$ 300,00")
    row.get_by_role("link").click()
    arguments = page.locator("#arguments-table")
    expect(arguments).to_contain_text("R$ 300,00")
    expect(arguments).to_contain_text("Amount in cents (R$ 1,00 = 100).")
    expect(page.get_by_text("Customer returned the item.")).to_be_visible()
    preview = page.locator("table.diff").first
    expect(preview.locator("tr.diff-changed", has_text="refunded_centavos")).to_contain_text("R$ 300,00")
    page.evaluate("window.sameDocument = true")  # gone if anything reloads the page
    page.keyboard.press("a")
    expect(page.locator("#approve-button")).to_be_focused()
    page.keyboard.press("Enter")
    expect(status_of(page)).to_have_text("Succeeded", timeout=RUN_TIMEOUT)
    expect(page.locator("#call-result")).to_contain_text("RE-")
    assert page.evaluate("window.sameDocument") is True
    assert Refund.objects.filter(call_id=call_id, amount_centavos=30000).count() == 1


def test_a_rejection_with_a_reason_reaches_the_agent_and_nothing_runs(support: AgentApi, log_in: Any) -> None:
    call_id = propose(support, 45000, "PED-00000008", "b-reject")
    page = log_in("bob")
    page.goto(f"/calls/{call_id}/")
    page.keyboard.press("r")
    expect(page.locator("#reject-reason")).to_be_focused()
    page.keyboard.type("The customer already got this refund by phone.")
    page.get_by_role("button", name="Reject").click()
    expect(status_of(page)).to_have_text("Rejected")
    body = support.get(call_id).json()
    assert body["status"] == "rejected"
    assert body["error"]["reason"] == "The customer already got this refund by phone."
    assert not Refund.objects.exists()
    assert Order.objects.get(order_id="PED-00000008").refunded_centavos == 0
    assert actions(call_id, "call.execution_started") == 0


def test_an_edit_from_800_to_150_shows_the_diff_lowers_the_tier_and_runs_150(support: AgentApi, log_in: Any) -> None:
    call_id = propose(support, 80000, "PED-00000006", "b-edit")
    page = log_in("alice")
    page.goto(f"/calls/{call_id}/")
    page.keyboard.press("e")
    page.get_by_label("valor_centavos").fill("15000")
    expect(page.locator(".money-hint")).to_have_text("= R$ 150,00")
    page.get_by_role("button", name="Review the edit").click()
    review = page.locator("#edit-review")
    amount = review.locator("tr.diff-changed", has_text="valor_centavos")
    expect(amount).to_contain_text("R$ 800,00")
    expect(amount).to_contain_text("R$ 150,00")
    expect(page.locator("#new-tier")).to_have_text("T1")
    page.get_by_role("button", name="Confirm edit").click()
    expect(page.locator(".notice-success")).to_contain_text("tier 2 → 1")
    expect(status_of(page)).to_have_text("Pending approval")
    # alice proposed the edited arguments: another reviewer approves them.
    expect(page.locator("#approve-refusal")).to_contain_text("You edited these arguments")
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    bob = log_in("bob")
    bob.goto(f"/calls/{call_id}/")
    bob.get_by_role("button", name="Approve").click()
    expect(status_of(bob)).to_have_text("Succeeded", timeout=RUN_TIMEOUT)
    (entry,) = Refund.objects.filter(call_id=call_id)
    assert entry.amount_centavos == 15000
    assert ToolCall.objects.get(pk=call_id).original_arguments["valor_centavos"] == 80000


def test_a_tier_3_refund_needs_two_distinct_reviewers_and_not_the_owner(support: AgentApi, log_in: Any) -> None:
    call_id = propose(support, 600000, "PED-00000010", "b-four-eyes")
    alice = log_in("alice")
    alice.goto(f"/calls/{call_id}/")
    alice.get_by_role("button", name="Approve").click()
    expect(alice.locator(".notice-success")).to_contain_text("Your approval is recorded (1 of 2)")
    expect(alice.locator("#approve-refusal")).to_contain_text("Waiting for a second reviewer")
    expect(alice.get_by_role("button", name="Approve")).to_have_count(0)
    expect(status_of(alice)).to_have_text("Pending approval")
    assert Decision.objects.filter(call_id=call_id, kind="approve").count() == 1

    owner = log_in("admin")
    owner.goto(f"/calls/{call_id}/")
    expect(owner.locator("#decision-panel .notice-warning")).to_contain_text("You own the agent")
    expect(owner.get_by_role("button", name="Approve")).to_have_count(0)  # the page offers nothing it refuses
    assert Decision.objects.filter(call_id=call_id, kind="approve").count() == 1

    bob = log_in("bob")
    bob.goto(f"/calls/{call_id}/")
    bob.get_by_role("button", name="Approve").click()
    expect(status_of(bob)).to_have_text("Succeeded", timeout=RUN_TIMEOUT)
    expect(status_of(alice)).to_have_text("Succeeded", timeout=RUN_TIMEOUT)  # alice's page followed by itself
    assert Refund.objects.filter(call_id=call_id, amount_centavos=600000).count() == 1


def test_two_reviewers_approving_at_once_make_one_decision_and_one_execution(support: AgentApi, log_in: Any) -> None:
    call_id = propose(support, 40000, "PED-00000007", "b-race")
    pages = [log_in("alice"), log_in("bob")]
    for page in pages:
        page.goto(f"/calls/{call_id}/")
    for page in pages:  # both requests leave before either answer arrives
        page.locator("#approve-button").click(no_wait_after=True)
    for page in pages:
        expect(status_of(page)).to_have_text("Succeeded", timeout=RUN_TIMEOUT)
    assert Decision.objects.filter(call_id=call_id).count() == 1
    assert actions(call_id, "call.approved") == 1
    assert actions(call_id, "call.execution_started") == 1
    assert Refund.objects.filter(call_id=call_id).count() == 1
    notices = " ".join(page.locator(".messages").inner_text() for page in pages)
    assert "Approved. The call runs now." in notices and "no longer waiting for a decision" in notices


def test_a_console_post_without_a_csrf_token_is_refused(support: AgentApi, log_in: Any) -> None:
    call_id = propose(support, 30000, "PED-00000005", "b-csrf")
    page = log_in("alice")
    call = ToolCall.objects.get(pk=call_id)
    response = page.request.post(f"/calls/{call_id}/approve/", form={"arguments_hash": call.arguments_hash})
    assert response.status == 403
    assert not Decision.objects.filter(call_id=call_id).exists()


# (agent, pedido, cents, motivo, minutes ago, justification)
SCENE = [
    ("support-agent", "PED-00000010", 650000, "erro_cobranca", 73, "Card statement shows the order charged twice."),
    ("billing-agent", "PED-00000009", 520000, "cancelamento_cliente", 58, "Cancelled within 7 days (CDC art. 49)."),
    (
        "support-agent",
        "PED-00000004",
        35000,
        "atraso_entrega",
        41,
        "Delivered 12 days late; customer asked for money back.",
    ),
    ("billing-agent", "PED-00000005", 49990, "cancelamento_cliente", 26, "Customer cancelled before shipping."),
    ("support-agent", "PED-00000016", 89900, "produto_defeituoso", 14, "Coffee maker stopped heating on day 3."),
    ("support-agent", "PED-00000018", 250000, "erro_cobranca", 7, "Charged R$ 2.500,00 for a cancelled order."),
]
FOCUS_JUSTIFICATION = (
    "Customer reports the notebook arrived with a cracked screen (ticket #48213). Photos are attached to the "
    "ticket and the order is within the 30-day window, so I am issuing a full refund."
)


def seed_scene(support: AgentApi) -> str:
    """Propose a realistic morning's queue; return the call whose page is worth a picture."""
    _, token = create_or_update_agent("billing-agent", {"emitir_estorno": 3}, owner_username="admin")
    agents = {"support-agent": support, "billing-agent": AgentApi(support.client, token)}
    now = timezone.now()
    for index, (agent, pedido, cents, motivo, minutes, why) in enumerate(SCENE):
        call_id = propose(agents[agent], cents, pedido, f"scene-{index}", motivo=motivo, justification=why)
        _backdate(call_id, now - timedelta(minutes=minutes))
    # The model's first try named a reason outside the enum; its retry drifted the amount tenfold.
    drifted = refund(12990, pedido="PED-00000017", motivo="defeito", conversation_id="conv-2291", step=3, call_index=0)
    refused = support.propose(drifted)
    assert refused.status_code == 422
    _backdate(refused.json()["call_id"], now - timedelta(minutes=3))
    conversation = {"conversation_id": "conv-2291", "step": 4, "call_index": 0}
    focus = propose(support, 129900, "PED-00000017", None, justification=FOCUS_JUSTIFICATION, **conversation)
    _backdate(focus, now - timedelta(minutes=2))
    lifecycle.approve(ToolCall.objects.get(pk=_scene_call(0)), User.objects.get(username="alice"))
    return focus


def _scene_call(index: int) -> str:
    return str(ToolCall.objects.get(idempotency_key=f"scene-{index}").pk)


def _backdate(call_id: str, created_at: datetime) -> None:
    """Move a call back in time (keeping its approval window), so the queue shows ages as on a real day."""
    call = ToolCall.objects.get(pk=call_id)
    expires_at = created_at + (call.expires_at - call.created_at) if call.expires_at else None
    ToolCall.objects.filter(pk=call_id).update(created_at=created_at, expires_at=expires_at)


def test_screenshots_of_the_queue_and_a_call_page(support: AgentApi, log_in: Any, tmp_path: Path) -> None:
    """Render realistic pages; GATEHOUSE_SCREENSHOT_DIR=docs/screenshots writes the README's images."""
    focus = seed_scene(support)
    folder = Path(os.environ.get("GATEHOUSE_SCREENSHOT_DIR") or tmp_path)
    page = log_in("bob")
    expect(page.locator("#queue-results tbody tr")).to_have_count(7)
    page.screenshot(path=str(folder / "queue.png"), full_page=True)
    page.goto(f"/calls/{focus}/")
    expect(page.locator("table.diff").first).to_be_visible()
    page.screenshot(path=str(folder / "call.png"), full_page=True)
    assert (folder / "queue.png").stat().st_size > 10_000 and (folder / "call.png").stat().st_size > 10_000
