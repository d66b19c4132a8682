"""Email, end to end with real processes: an aiosmtpd server receives the pending mail, a reviewer follows its
link in Chromium to the confirmation page (which decides nothing), approves there, and a worker runs the call."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from email.message import Message
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from approvals.models import Decision, ToolCall
from approvals.states import Status
from demo.models import Refund
from notifications.models import Channel, Delivery, DeliveryStatus, Kind, Route
from tests.browser import propose_refund
from tests.conftest import AgentApi
from tests.notification_peers import SmtpServer
from tests.processes import CeleryWorker, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.worker]

LINK = re.compile(r"(http://\S+/notifications/decide/\S+/)")


def text_of(message: Message) -> str:
    """Return the plain-text part of a mail."""
    for part in message.walk():
        if part.get_content_type() == "text/plain":
            payload = part.get_payload(decode=True)
            assert isinstance(payload, bytes)
            return payload.decode()
    raise AssertionError("no text part")


@pytest.fixture
def mail_channel(db: None) -> Channel:
    channel = Channel.objects.create(name="reviewers-mail", kind=Kind.EMAIL, email_to=["reviewers@example.com"])
    Route.objects.create(channel=channel, min_tier=2)
    return channel


@pytest.fixture
def mailing_worker(
    start_worker: Callable[..., CeleryWorker], smtp_server: SmtpServer, live_server: Any, secrets_key: dict[str, str]
) -> CeleryWorker:
    """A worker that mails through the aiosmtpd process and links to the live server."""
    return start_worker(EMAIL_URL=smtp_server.url, GATEHOUSE_SITE_URL=live_server.url, **secrets_key)


def test_the_pending_mail_links_to_a_page_that_decides_nothing_until_a_reviewer_approves_there(
    mail_channel: Channel,
    mailing_worker: CeleryWorker,
    smtp_server: SmtpServer,
    demo_services: str,
    support: AgentApi,
    log_in: Callable[..., Any],
    people: dict[str, User],
    tmp_path: Path,
) -> None:
    call = propose_refund(
        support, 30000, "mail-approve", pedido="PED-00000004", justification="Customer returned the item."
    )
    assert call.status == Status.PENDING_APPROVAL
    mails = wait_until(smtp_server.messages, timeout=30)
    assert len(mails) == 1
    mail = mails[0]
    assert mail["To"] == "reviewers@example.com"
    assert "Approval needed: emitir_estorno R$ 300,00 by support-agent" in mail["Subject"].replace("\n", "")
    body = text_of(mail)
    assert "Tier: 2" in body and "R$ 300,00" in body
    link = LINK.search(body)
    assert link, body
    # The worker records the delivery once the server has taken the mail: a moment after it arrives.
    assert wait_until(lambda: Delivery.objects.get(call_id=call.pk).status == DeliveryStatus.DELIVERED, timeout=10)

    page = log_in("alice")
    page.goto(link.group(1))
    expect(page.locator("#arguments-table")).to_contain_text("R$ 300,00")
    preview = page.locator("#preview-panel tr.diff-changed", has_text="refunded_centavos")
    expect(preview).to_contain_text("R$ 300,00")  # the dry run, as the console shows it
    call.refresh_from_db()
    assert call.status == Status.PENDING_APPROVAL  # opening the link decided nothing
    assert not Decision.objects.filter(call=call).exists()
    folder = Path(os.environ.get("GATEHOUSE_SCREENSHOTS") or tmp_path)  # docs material when it names a folder
    page.screenshot(path=str(folder / "email-confirmation.png"), full_page=True)
    page.locator("#confirm-approve").click()
    expect(page.locator(".messages")).to_contain_text("Approved")
    wait_until(lambda: ToolCall.objects.get(pk=call.pk).status == Status.SUCCEEDED, timeout=30)
    assert Refund.objects.filter(call_id=call.pk, amount_centavos=30000).count() == 1
    assert Decision.objects.get(call=call).reviewer == people["alice"]


def test_the_mail_s_link_needs_a_signed_in_reviewer_and_a_get_never_decides(
    mail_channel: Channel,
    mailing_worker: CeleryWorker,
    smtp_server: SmtpServer,
    support: AgentApi,
    client: Any,
) -> None:
    call = propose_refund(support, 30000, "mail-get")
    link = LINK.search(text_of(wait_until(smtp_server.messages, timeout=30)[0]))
    assert link
    path = link.group(1).split("://", 1)[1].split("/", 1)[1]
    anonymous = client.get(f"/{path}")
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    assert client.post(f"/{path}", {"decision": "approve"}).status_code in (302, 403)
    call.refresh_from_db()
    assert call.status == Status.PENDING_APPROVAL
    assert not Decision.objects.filter(call=call).exists()


@pytest.mark.django_db
def test_the_confirmation_page_refuses_a_link_to_arguments_that_changed_and_a_forged_link(
    support: AgentApi, console: Callable[[str], Any]
) -> None:
    from notifications import links
    from tests.test_notifications_slack import edit

    call = propose_refund(support, 30000, "mail-edited")
    path = f"/notifications/decide/{links.token_for(call)}/"
    edit(console("bob"), call, valor_centavos=25000)
    alice = console("alice")
    page = alice.get(path).content.decode()
    assert 'id="call-changed"' in page and 'id="confirm-approve"' not in page
    refused = alice.post(path, {"decision": "approve"}, follow=True).content.decode()
    assert "Its arguments changed since this message was sent." in refused
    call.refresh_from_db()
    assert call.status == Status.PENDING_APPROVAL and not Decision.objects.filter(call=call, kind="approve").exists()
    assert alice.get(path[:-3] + "xx/").status_code == 400


@pytest.mark.django_db
def test_a_reviewer_opts_in_to_mail_on_the_preferences_page(console: Callable[[str], Any]) -> None:
    from notifications.channels.mail import opted_in_reviewers

    alice = console("alice")
    assert 'href="/notifications/preferences/"' in alice.get("/").content.decode()  # the console links to it
    assert alice.get("/notifications/preferences/").status_code == 200
    assert opted_in_reviewers() == []
    assert alice.post("/notifications/preferences/", {"email_pending": "on"}).status_code == 302
    assert opted_in_reviewers() == ["alice@example.com"]
