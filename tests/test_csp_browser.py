"""The Content-Security-Policy in Debian's Chromium: the console and the admin work under it and break none of it.

Every page below is watched two ways: the document's own `securitypolicyviolation` events (recorded by a script
Playwright adds before the page's own, which the policy does not govern) and Chromium's console, where it reports
each thing it refused.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, Request, expect

from demo.models import Refund
from tests.conftest import AgentApi, refund
from tests.processes import CeleryWorker
from toolcatalog.models import Tool

pytestmark = [pytest.mark.browser, pytest.mark.worker]

RUN_TIMEOUT = 20_000  # ms: a worker claims, executes and verifies a refund well within this
WATCH_VIOLATIONS = """
window.cspViolations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.cspViolations.push(`${event.violatedDirective} ${event.blockedURI} ${event.sourceFile}:${event.lineNumber}`);
});
"""


@pytest.fixture
def support(celery_worker: CeleryWorker, demo_services: str, people: dict[str, User], agent_api: Any) -> AgentApi:
    """The support agent (owned by admin), proposing against the seeded demo orders."""
    return agent_api("support-agent", {"emitir_estorno": 3, "get_order_status": 0}, owner="admin")


class Watched:
    """A signed-in page whose every document is watched for what the policy refuses."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.refusals: list[str] = []
        page.context.add_init_script(WATCH_VIOLATIONS)
        page.on("console", self._console)

    def _console(self, message: Any) -> None:
        if "Content Security Policy" in message.text or "Content-Security-Policy" in message.text:
            self.refusals.append(message.text)

    def visit(self, path: str) -> Page:
        """Open `path`, let its htmx requests settle, and fail on anything the policy refused there."""
        response = self.page.goto(path)
        assert response is not None and response.ok, path
        assert "script-src 'self'" in response.headers["content-security-policy"]
        self.page.wait_for_load_state("networkidle")
        self.assert_nothing_refused(path)
        return self.page

    def assert_nothing_refused(self, where: str) -> None:
        violations = self.page.evaluate("window.cspViolations")
        assert violations == [], (where, violations)
        assert self.refusals == [], (where, self.refusals)
        # htmx would have added its indicator's <style> here had base.html not turned it off.
        assert self.page.evaluate("document.querySelectorAll('style').length") == 0, where


def is_queue_refresh(request: Request) -> bool:
    return urlsplit(request.url).path == "/" and request.headers.get("hx-request") == "true"


def test_console_pages_and_the_admin_run_under_the_policy_and_approve_still_works(
    support: AgentApi, log_in: Any
) -> None:
    response = support.propose(refund(30000, pedido="PED-00000004", idempotency_key="csp-approve"))
    assert response.status_code == 202, response.content
    call_id = response.json()["id"]

    alice = Watched(log_in("alice"))
    queue = alice.visit("/")
    with queue.expect_response(lambda response: is_queue_refresh(response.request), timeout=8_000):
        pass  # htmx polls the queue (every 5 s)
    queue.wait_for_timeout(300)  # the refreshed rows are in place; the next poll is 5 s away

    # Picking a call pauses the queue's refresh (batch.js, an htmx:confirm listener: the policy allows no filter).
    pick = queue.locator(f'tr[data-call="{call_id}"] .pick input[type=checkbox]')
    pick.check()
    refreshes: list[str] = []
    queue.on("request", lambda request: refreshes.append(request.url) if is_queue_refresh(request) else None)
    queue.wait_for_timeout(6_500)
    assert refreshes == []
    assert pick.is_checked()  # the rows were not redrawn under it
    pick.uncheck()
    with queue.expect_request(is_queue_refresh, timeout=8_000):
        pass
    alice.assert_nothing_refused("the queue, polling")

    call_page = alice.visit(f"/calls/{call_id}/")
    call_page.evaluate("window.sameDocument = true")  # gone if anything reloads the page
    call_page.get_by_role("button", name="Approve").click()
    expect(call_page.locator("#call-live .status")).to_have_text("Succeeded", timeout=RUN_TIMEOUT)
    assert call_page.evaluate("window.sameDocument") is True
    assert Refund.objects.filter(call_id=call_id, amount_centavos=30000).count() == 1
    alice.assert_nothing_refused("the call page, approved")

    overview = alice.visit("/overview/")
    expect(overview.locator("svg.bar rect.bar-fill").first).to_have_attribute("width", "100")
    audit = alice.visit("/audit/")
    expect(audit.locator("#chain-status")).not_to_have_class("chain chain-checking")  # its htmx load request ran
    alice.assert_nothing_refused("the audit log")

    admin = Watched(log_in("admin"))
    tool = Tool.objects.get(name="emitir_estorno")
    admin.visit("/admin/")
    admin.visit(f"/admin/toolcatalog/tool/{tool.pk}/change/")
    whatif = admin.visit(f"/admin/toolcatalog/tool/{tool.pk}/whatif/")
    whatif.get_by_role("button", name="Replay").click()
    expect(whatif.locator("#whatif-report")).to_be_visible()
    admin.assert_nothing_refused("the what-if replay")
