"""Batch decisions in Debian's Chromium against the live server, executed by a real Celery worker."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from approvals.models import Status, ToolCall
from demo.downstream import order_id
from demo.models import Refund
from tests.browser import Console
from tests.conftest import AgentApi, refund
from tests.processes import CeleryWorker, wait_until
from tests.test_notifications_slack import edit

pytestmark = [pytest.mark.browser, pytest.mark.worker]

# Demo orders of R$ 350 or more (AMOUNTS repeats every ten orders): each takes one R$ 210 refund.
ORDERS = [4, 5, 6, 7, 8, 9, 10, 14, 15, 16, 17]


@pytest.fixture
def support(celery_worker: CeleryWorker, demo_services: str, people: dict[str, User], agent_api: Any) -> AgentApi:
    """The support agent (owned by admin), proposing against the seeded demo orders."""
    return agent_api("support-agent", {"emitir_estorno": 3}, owner="admin")


def propose(api: AgentApi, valor: int, order: int) -> ToolCall:
    response = api.propose(refund(valor, pedido=order_id(order), idempotency_key=f"batch-{order}"))
    assert response.status_code == 202, response.content
    return ToolCall.objects.get(pk=response.json()["id"])


def test_ten_selected_calls_run_each_bound_to_its_own_hash_and_an_edited_one_is_left_out(
    support: AgentApi, log_in: Any, people: dict[str, User]
) -> None:
    calls = [propose(support, 21000 + index, order) for index, order in enumerate(ORDERS)]
    page = log_in("alice")
    for call in calls:  # select each row from the keyboard: focus it, press x
        page.locator(f'#queue-yours tr[data-call="{call.pk}"] a.row-link').focus()
        page.keyboard.press("x")
    expect(page.locator("#queue-yours .pick input:checked")).to_have_count(11)
    edited, ten = calls[4], calls[:4] + calls[5:]
    edit(Console(people["bob"]), edited, valor_centavos=20500)  # after alice's page loaded
    page.keyboard.press("Shift+A")
    confirm = page.locator("#batch-confirm-button")
    expect(confirm).to_be_focused()
    expect(confirm).to_have_text("Confirm: approve 11")
    page.keyboard.press("Enter")
    results = page.locator("#batch-results")
    expect(results.locator("tr", has_text="Approved. The call runs now.")).to_have_count(10)
    left_out = results.locator(f'tr[data-call="{edited.pk}"]')
    expect(left_out).to_contain_text("Left out: its arguments changed since the queue was drawn.")
    expect(left_out).to_contain_text(str(edited.pk)[:8])
    ids = [call.pk for call in ten]
    wait_until(lambda: ToolCall.objects.filter(pk__in=ids, status=Status.SUCCEEDED).count() == 10, timeout=60)
    assert Refund.objects.count() == 10
    for call in ten:
        call.refresh_from_db()
        assert call.status == Status.SUCCEEDED, call.status
        assert call.approved_arguments_hash == call.arguments_hash
        assert Refund.objects.get(call_id=call.pk).amount_centavos == call.arguments["valor_centavos"]
    assert len({call.approved_arguments_hash for call in ten}) == 10
    edited.refresh_from_db()
    assert edited.status == Status.PENDING_APPROVAL and not Refund.objects.filter(call_id=edited.pk).exists()
    expect(page.locator(f'#queue-results tr[data-call="{edited.pk}"]')).to_be_visible()  # the queue refreshed
    expect(page.locator("#queue-results tr[data-call]")).to_have_count(1)
