"""Nothing sensitive leaves: a value the tool marks sensitive never appears in an email, a Slack message or a
webhook body; money is formatted as the console formats it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.core import mail as outbox_mail

from approvals.models import ToolCall
from notifications.channels import mail, slack, webhooks
from notifications.models import Channel, Delivery, EventType, Kind, Route
from tests.conftest import AgentApi
from toolcatalog.models import RiskTier, Tool

pytestmark = pytest.mark.django_db

CARD_TOKEN, PIN = "tok_SECRET_4242_marker", "PIN-9731-marker"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "invoice_id": {"type": "string", "pattern": "^INV-[0-9]+$"},
        "amount_centavos": {"type": "integer", "minimum": 1},
        "card": {
            "type": "object",
            "properties": {
                "holder": {"type": "string"},
                "token": {"type": "string", "x-gatehouse-sensitive": True},
            },
            "required": ["holder", "token"],
        },
        "pin": {"type": "string", "writeOnly": True},
    },
    "required": ["invoice_id", "amount_centavos", "card", "pin"],
    "additionalProperties": False,
}


@pytest.fixture
def held_payment(catalog: Any, agent_api: Callable[..., AgentApi]) -> ToolCall:
    """A held call of a tool with a sensitive card token and PIN."""
    Tool.objects.create(
        name="pay_invoice",
        input_schema=SCHEMA,
        base_tier=RiskTier.objects.get(level=2),
        executor_kind="gatehouse_protocol",
        executor_ref="http://127.0.0.1:9/pay",
        resource_argument="invoice_id",
    )
    api = agent_api("payer", {"pay_invoice": 3})
    arguments = {
        "invoice_id": "INV-77",
        "amount_centavos": 123456,
        "card": {"holder": "Ana", "token": CARD_TOKEN},
        "pin": PIN,
    }
    response = api.propose({"tool": "pay_invoice", "arguments": arguments, "idempotency_key": "pay-1"})
    assert response.status_code == 202, response.content
    return ToolCall.objects.select_related("tool", "agent").get(pk=response.json()["id"])


def delivery_for(call: ToolCall, kind: str, **channel: Any) -> Delivery:
    made = Channel.objects.create(name=f"ch-{kind}", kind=kind, **channel)
    payload = {"type": "call.pending", "action": "call.proposed", "call_id": str(call.pk), "event": {}}
    return Delivery.objects.create(
        channel=made,
        route=Route.objects.create(channel=made),
        event_type=EventType.PENDING,
        event_key="k",
        call_id=call.pk,
        payload=payload,
    )


def test_no_channel_carries_a_sensitive_value_and_money_reads_as_in_the_console(
    held_payment: ToolCall, settings: Any
) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    mail.send(delivery_for(held_payment, Kind.EMAIL, email_to=["ops@example.com"]), held_payment)
    [message] = outbox_mail.outbox
    html = message.alternatives[0][0]  # type: ignore[index]
    blocks = json.dumps(slack.call_blocks(held_payment, True), ensure_ascii=False)
    body = json.dumps(webhooks.cloud_event(delivery_for(held_payment, Kind.WEBHOOK), held_payment), ensure_ascii=False)
    for text in (message.subject, message.body, str(html), blocks, body):
        assert CARD_TOKEN not in text and PIN not in text
    assert "R$ 1.234,56" in message.subject and "R$ 1.234,56" in message.body and "R$ 1.234,56" in blocks
    assert "•••• (set)" in message.body and "•••• (set)" in body
    assert json.loads(body)["data"]["call"]["arguments"]["pin"] == "•••• (set)"
