"""The console on a phone (390 × 844) in Debian's Chromium against the live server, with a real worker.

Nothing may be wider than the screen (no sideways scrolling, no table cut off inside a
scroll box), and the Decision panel must be reachable and work. Set GATEHOUSE_SCREENSHOTS
to a folder (docs/screenshots) to keep the pages these tests look at as PNGs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from approvals.models import ToolCall
from demo.models import Refund
from tests.browser import LAPTOP
from tests.conftest import AgentApi, refund
from tests.processes import CeleryWorker

pytestmark = [pytest.mark.browser, pytest.mark.worker]

PHONE = {"width": 390, "height": 844}
RUN_TIMEOUT = 20_000  # ms: a worker claims, executes and verifies a refund well within this

# Every visible element whose box reaches past the viewport's right edge, and how far the page scrolls sideways.
OVERFLOW_SCRIPT = """() => {
  const width = document.documentElement.clientWidth;
  const wide = [];
  for (const el of document.querySelectorAll("body *")) {
    const box = el.getBoundingClientRect();
    if (box.width === 0 || box.height === 0) continue;
    if (box.right > width + 1 || box.width > width + 1) {
      wide.push(`${el.tagName.toLowerCase()}${el.id ? "#" + el.id : ""}.${el.className} → ${Math.round(box.right)}px`);
    }
  }
  return {viewport: width, scrollWidth: document.documentElement.scrollWidth, wide: wide.slice(0, 15)};
}"""


@pytest.fixture
def support(celery_worker: CeleryWorker, demo_services: str, people: dict[str, User], agent_api: Any) -> AgentApi:
    """The support agent (owned by admin), proposing against the seeded demo orders."""
    return agent_api("support-agent", {"emitir_estorno": 3, "get_order_status": 0}, owner="admin")


def propose(api: AgentApi, valor: int, pedido: str, key: str, **extra: Any) -> str:
    response = api.propose(refund(valor, pedido=pedido, idempotency_key=key, **extra))
    assert response.status_code in (201, 202), response.content
    return response.json()["id"]


def a_busy_queue(api: AgentApi) -> str:
    """Propose the calls a reviewer typically finds waiting; return the tier-2 refund of order 4."""
    propose(api, 650000, "PED-00000009", "s-large", justification="Order cancelled before dispatch; full refund.")
    # Earlier in the same conversation, a small refund on the same order ran without review.
    propose(
        api, 4000, "PED-00000004", "s-shipping", conversation_id="support-chat-1187", step=2,
        justification="Shipping was charged twice; refunding the duplicate.",
    )  # fmt: skip
    call = propose(
        api,
        30000,
        "PED-00000004",
        "s-partial",
        conversation_id="support-chat-1187",
        step=3,
        justification="The customer returned one of the two items; refunding its price as the policy says.",
    )
    propose(api, 25000, "PED-00000006", "s-late", justification="Delivered nine days late; goodwill refund.")
    return call


def a_refund_beyond_its_order(api: AgentApi) -> str:
    """Propose R$ 450,00 back on an order of R$ 89,90: the downstream would refuse it."""
    return propose(api, 45000, "PED-00000001", "s-beyond", justification="Customer asked for compensation.")


def assert_fits(page: Page) -> None:
    layout = page.evaluate(OVERFLOW_SCRIPT)
    assert layout["scrollWidth"] <= layout["viewport"], layout
    assert layout["wide"] == [], layout


def keep_screenshot(page: Page, name: str) -> None:
    """Save the page as docs material when GATEHOUSE_SCREENSHOTS names a folder."""
    folder = os.environ.get("GATEHOUSE_SCREENSHOTS")
    if folder:
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def test_the_queue_and_a_call_fit_a_phone_and_approve_works_there(
    support: AgentApi, log_in: Callable[..., Page]
) -> None:
    call_id = a_busy_queue(support)
    page = log_in("alice", PHONE)
    row = page.locator(f'tr[data-call="{call_id}"]')
    expect(row).to_contain_text("R$ 300,00")
    assert_fits(page)
    keep_screenshot(page, "queue-phone")

    row.get_by_role("link").click()
    expect(page.locator("#arguments-table")).to_contain_text("R$ 300,00")
    expect(page.locator("#preview-panel table.diff")).to_be_visible()
    assert_fits(page)
    keep_screenshot(page, "call-phone")

    expect(page).to_have_title(re.compile(r"^\(3\) emitir_estorno by support-agent · Gatehouse$"))
    page.get_by_role("link", name="Go to the decision").tap()
    approve = page.locator("#approve-button")
    expect(approve).to_be_in_viewport()
    box = approve.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"]
    approve.tap()
    expect(page.locator("#call-live .status")).to_have_text("Succeeded", timeout=RUN_TIMEOUT)
    expect(page).to_have_title(re.compile(r"^\(2\) "))  # the badge's refresh carries the count into the title
    # Without a reload, the page's words follow the call: what ran, what happened.
    expect(page.locator("#arguments-caption")).to_have_text("what ran")
    expect(page.locator("#preview-title")).to_have_text("What the dry run predicted before the decision")
    expect(page.locator("#call-result h3")).to_have_text("What happened: the result")
    assert_fits(page)
    assert Refund.objects.filter(call_id=call_id, amount_centavos=30000).count() == 1
    assert ToolCall.objects.get(pk=call_id).decisions.get().reviewer_name == "alice"


def test_the_queue_and_a_call_fit_a_laptop_screen_without_sideways_scrolling(
    support: AgentApi, log_in: Callable[..., Page]
) -> None:
    call_id = a_busy_queue(support)
    beyond = a_refund_beyond_its_order(support)
    page = log_in("bob", LAPTOP)
    page.goto(f"/calls/{beyond}/")  # a reviewer's first look asks the downstream for the dry run
    expect(page.locator("#preview-panel .notice-warning")).to_be_visible()
    page.goto("/")
    expect(page.locator(f'tr[data-call="{beyond}"]')).to_contain_text("would be refused")
    expect(page.locator(f'tr[data-call="{call_id}"]')).not_to_contain_text("would be refused")
    assert_fits(page)
    keep_screenshot(page, "queue")
    page.goto(f"/calls/{call_id}/")
    expect(page.locator("#preview-panel table.diff")).to_be_visible()
    assert_fits(page)
    keep_screenshot(page, "call")


def test_the_money_hint_turns_red_for_an_amount_the_tool_would_refuse(
    support: AgentApi, log_in: Callable[..., Page]
) -> None:
    call_id = propose(support, 30000, "PED-00000004", "s-hint")
    page = log_in("bob", PHONE)
    page.goto(f"/calls/{call_id}/edit/")
    amount, hint = page.get_by_label("valor_centavos"), page.locator(".money-hint")
    amount.fill("15000")
    expect(hint).to_have_text("= R$ 150,00")
    expect(hint).not_to_have_class(re.compile("money-hint-invalid"))
    amount.fill("6000000")
    expect(hint).to_have_text("= R$ 60.000,00 · at most R$ 50.000,00")
    expect(hint).to_have_class(re.compile("money-hint-invalid"))
    assert page.evaluate("getComputedStyle(document.querySelector('.money-hint')).color") == "rgb(180, 35, 44)"
    assert_fits(page)
