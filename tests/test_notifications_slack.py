"""Slack: Block Kit messages to a local server with the Web API's shape (slack_sdk's base_url), and button
clicks signed exactly as Slack signs them, decided under every rule of the console."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import User
from django.test import Client

from approvals.models import Decision, ToolCall
from approvals.states import Status
from notifications.channels import slack
from notifications.models import Channel, Kind, Route, SlackIdentity
from tests.browser import Console, propose_refund
from tests.conftest import AgentApi
from tests.notification_peers import SlackApi
from tests.processes import CeleryWorker, wait_until

TOKEN = "xoxb-test-token"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


@pytest.fixture
def slack_channel(slack_api: SlackApi, secrets_key: dict[str, str], people: dict[str, User]) -> Channel:
    """A Slack channel on the stand-in API, and the Slack users it knows (emails confirmed by Slack)."""
    channel = Channel.objects.create(
        name="approvals-slack",
        kind=Kind.SLACK,
        slack_channel="C0APPROVALS",
        api_url=slack_api.url,
        secret=TOKEN,
        signing_secret=SIGNING_SECRET,
    )
    Route.objects.create(channel=channel, min_tier=2)
    for name in ("alice", "bob", "admin", "carol"):
        profile = {"email": f"{name}@example.com"}
        slack_api.users[f"U{name.upper()}"] = {"id": f"U{name.upper()}", "is_email_confirmed": True, "profile": profile}
    User.objects.filter(username="carol").update(email="carol@example.com")
    return channel


def signed(body: str, secret: str = SIGNING_SECRET, at: int | None = None) -> dict[str, str]:
    """Return Slack's signature headers for `body`: v0=HMAC-SHA256(secret, "v0:{timestamp}:{body}")."""
    timestamp = str(at if at is not None else int(time.time()))
    digest = hmac.new(secret.encode(), f"v0:{timestamp}:{body}".encode(), hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": timestamp, "X-Slack-Signature": f"v0={digest}"}


def click_body(slack_user: str, action: str, button_value: str, response_url: str = "") -> str:
    """Return the form body Slack posts for a button click (block_actions)."""
    payload = {
        "type": "block_actions",
        "user": {"id": slack_user, "username": slack_user.lower()},
        "team": {"id": "T0GATEHOUSE"},
        "actions": [{"action_id": action, "block_id": "gatehouse_decision", "value": button_value}],
        "response_url": response_url,
    }
    return urlencode({"payload": json.dumps(payload)})


def button_value(call: ToolCall) -> str:
    """Return what the call's Approve button carries, as its message was rendered."""
    call.refresh_from_db()
    actions = next(block for block in slack.call_blocks(call, True) if block["type"] == "actions")
    return str(actions["elements"][0]["value"])


def click(channel: Channel, slack_user: str, action: str, value: str, response_url: str = "", **headers: str) -> Any:
    body = click_body(slack_user, action, value, response_url)
    sent = headers or signed(body)
    path = f"/notifications/slack/{channel.pk}/interactions/"
    return Client().post(path, body, content_type="application/x-www-form-urlencoded", headers=sent)


def answer(response: Any) -> str:
    assert response.status_code == 200, response.content
    return str(response.json()["text"])


@pytest.mark.worker
def test_the_pending_message_has_the_expected_blocks_and_is_updated_in_place_when_decided(
    slack_channel: Channel,
    slack_api: SlackApi,
    start_worker: Callable[..., CeleryWorker],
    secrets_key: dict[str, str],
    live_server: Any,
    demo_services: str,
    support: AgentApi,
    console: Callable[[str], Console],
) -> None:
    start_worker(GATEHOUSE_SITE_URL=live_server.url, **secrets_key)
    call = propose_refund(support, 30000, "slack-post", pedido="PED-00000004")
    posted = wait_until(lambda: slack_api.of("chat.postMessage"), timeout=30)[0]
    assert posted["channel"] == "C0APPROVALS"
    blocks = {block["type"]: block for block in reversed(posted["blocks"])}  # the first of each type
    assert blocks["header"]["text"]["text"] == "Approval needed: emitir_estorno"
    fields = [field["text"] for field in blocks["section"]["fields"]]
    assert "*Agent*\nsupport-agent" in fields and "*Tier*\n2" in fields
    assert "*Key argument*\nvalor_centavos: R$ 300,00" in fields
    assert any(text.startswith("*Time left*\n") and text != "*Time left*\n—" for text in fields)
    assert f"{live_server.url}/calls/{call.pk}/" in blocks["context"]["elements"][0]["text"]
    buttons = {button["action_id"]: json.loads(button["value"]) for button in blocks["actions"]["elements"]}
    bound = {"c": str(call.pk), "h": call.arguments_hash, "v": call.tool_version}
    assert buttons == {"approve": bound, "reject": bound}
    headers = next(h for name, _, h in slack_api.calls if name == "chat.postMessage")
    assert headers["Authorization"] == f"Bearer {TOKEN}"

    owner = click(slack_channel, "UADMIN", "approve", button_value(call), response_url=f"{slack_api.url}hooks/click-1")
    assert answer(owner).startswith("Refused: You own the agent")
    [told] = wait_until(lambda: slack_api.of("click-1"), timeout=30)  # the worker answers through response_url
    assert told == {"text": answer(owner), "response_type": "ephemeral", "replace_original": False}

    console("alice").approve(call)  # decided in the console: the message changes in Slack
    updated = wait_until(lambda: slack_api.of("chat.update"), timeout=30)[0]
    assert updated["channel"] == posted["channel"] and updated["ts"]
    assert [block["type"] for block in updated["blocks"]] == ["header", "section", "section", "context"]  # no buttons
    assert updated["blocks"][0]["text"]["text"].startswith(("Approved", "Executing", "Succeeded"))


@pytest.mark.django_db
def test_signed_clicks_approve_and_reject_as_the_slack_users_gatehouse_accounts(
    slack_channel: Channel, support: AgentApi, people: dict[str, User]
) -> None:
    approved = propose_refund(support, 30000, "slack-approve")
    assert answer(click(slack_channel, "UALICE", "approve", button_value(approved))).startswith("Approved")
    approved.refresh_from_db()
    assert approved.status == Status.APPROVED
    assert Decision.objects.get(call=approved).reviewer == people["alice"]
    assert SlackIdentity.objects.get(slack_user_id="UALICE").user == people["alice"]

    rejected = propose_refund(support, 30000, "slack-reject")
    assert answer(click(slack_channel, "UBOB", "reject", button_value(rejected))).startswith("Rejected")
    rejected.refresh_from_db()
    assert rejected.status == Status.REJECTED and rejected.error["reason"] == "Rejected in Slack by bob."


@pytest.mark.django_db
def test_a_bad_signature_or_a_stale_timestamp_is_refused_with_401(slack_channel: Channel, support: AgentApi) -> None:
    call = propose_refund(support, 30000, "slack-forged")
    value = button_value(call)
    body = click_body("UALICE", "approve", value)
    assert click(slack_channel, "UALICE", "approve", value, **signed(body, secret="not-the-secret")).status_code == 401
    stale = signed(body, at=int(time.time()) - 600)
    assert click(slack_channel, "UALICE", "approve", value, **stale).status_code == 401
    assert click(slack_channel, "UALICE", "approve", value, **{"X-Slack-Signature": "v0=00"}).status_code == 401
    call.refresh_from_db()
    assert call.status == Status.PENDING_APPROVAL and not Decision.objects.filter(call=call).exists()


@pytest.mark.django_db
def test_a_click_after_the_arguments_were_edited_is_refused_with_the_reason(
    slack_channel: Channel, support: AgentApi, console: Callable[[str], Console]
) -> None:
    call = propose_refund(support, 30000, "slack-edited")
    value = button_value(call)  # the message as it was sent
    edit(console("bob"), call, valor_centavos=25000)
    text = answer(click(slack_channel, "UALICE", "approve", value))
    assert text.startswith("Refused: Its arguments changed since this message was sent.")
    assert f"/calls/{call.pk}/" in text
    call.refresh_from_db()
    assert call.status == Status.PENDING_APPROVAL
    assert not Decision.objects.filter(call=call, kind="approve").exists()


def edit(reviewer: Console, call: ToolCall, **changes: Any) -> None:
    """Confirm an edit of the call's arguments, as the console's edit form does."""
    call.refresh_from_db()
    values = {name: value for name, value in {**call.arguments, **changes}.items() if name != "idempotency_key"}
    values["motivo"] = json.dumps(values["motivo"])  # enum choices travel as JSON
    response = reviewer.post(f"/calls/{call.pk}/edit/", {**values, "base_hash": call.arguments_hash, "confirm": "1"})
    assert response.status_code == 302, response.content
    call.refresh_from_db()


@pytest.mark.django_db
def test_a_click_by_the_agent_s_owner_is_refused(slack_channel: Channel, support: AgentApi) -> None:
    call = propose_refund(support, 30000, "slack-owner")
    text = answer(click(slack_channel, "UADMIN", "approve", button_value(call)))  # admin owns support-agent
    assert text == "Refused: You own the agent that proposed this call; another reviewer must decide it."
    call.refresh_from_db()
    assert call.status == Status.PENDING_APPROVAL


@pytest.mark.django_db
def test_a_tier_3_call_needs_two_different_slack_users(slack_channel: Channel, support: AgentApi) -> None:
    call = propose_refund(support, 600000, "slack-four-eyes")
    assert call.risk_tier == 3
    value = button_value(call)
    assert "recorded (1 of 2)" in answer(click(slack_channel, "UALICE", "approve", value))
    again = answer(click(slack_channel, "UALICE", "approve", value))
    assert again.startswith("You approved these arguments (1 of 2)")
    call.refresh_from_db()
    assert call.status == Status.PENDING_APPROVAL
    assert answer(click(slack_channel, "UBOB", "approve", value)).startswith("Approved")
    call.refresh_from_db()
    assert call.status == Status.APPROVED and call.approver_names() == ["alice", "bob"]


@pytest.mark.django_db
def test_a_slack_user_without_a_confirmed_matching_email_is_refused_and_offered_a_link(
    slack_channel: Channel, slack_api: SlackApi, support: AgentApi, console: Callable[[str], Console]
) -> None:
    slack_api.users["UEVE"] = {"id": "UEVE", "is_email_confirmed": False, "profile": {"email": "alice@example.com"}}
    call = propose_refund(support, 30000, "slack-unknown")
    text = answer(click(slack_channel, "UEVE", "approve", button_value(call)))
    assert text.startswith("Refused: your Slack account is not linked to a Gatehouse reviewer.")
    link = text.split("Link it once: ", 1)[1]
    path = "/" + link.split("://", 1)[1].split("/", 1)[1]
    bob = console("bob")
    assert bob.get(path).status_code == 200  # the page asks; it links nothing yet
    assert not SlackIdentity.objects.filter(slack_user_id="UEVE").exists()
    assert bob.post(path).status_code == 302
    assert answer(click(slack_channel, "UEVE", "approve", button_value(call))).startswith("Approved")
    assert Decision.objects.get(call=call).reviewer_name == "bob"
