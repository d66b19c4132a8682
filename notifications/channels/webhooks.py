"""Outgoing webhooks: CloudEvents 1.0 JSON, signed per Standard Webhooks (webhook-id is the delivery id)."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import orjson
from standardwebhooks.webhooks import EmptyWebhookSecretError, Webhook

from approvals.models import ToolCall
from audit.typealiases import JSONObject
from notifications import render
from notifications.channels import ChannelError
from notifications.models import Delivery

CONTENT_TYPE = "application/cloudevents+json"
TIMEOUT_SECONDS = 10.0


def cloud_event(delivery: Delivery, call: ToolCall | None) -> JSONObject:
    """Return the delivery as a structured-mode CloudEvent 1.0 (its id is the delivery id)."""
    payload = delivery.payload
    event: JSONObject = {
        "specversion": "1.0",
        "id": str(delivery.pk),
        "source": render.site_url("/"),
        "type": event_type_name(delivery.event_type),
        "time": payload.get("time") or delivery.created_at.isoformat(),
        "datacontenttype": "application/json",
        "data": {"action": payload.get("action"), "agent": payload.get("agent"), "tool": payload.get("tool")},
    }
    if call is not None:
        event["subject"] = str(call.pk)
        event["data"] = {**event["data"], "event": payload.get("event", {}), "call": call_data(call)}
    return event


def event_type_name(event_type: str) -> str:
    """Return the CloudEvents type: the event's name under the `gatehouse.` prefix."""
    return event_type if event_type.startswith("gatehouse.") else f"gatehouse.{event_type}"


def call_data(call: ToolCall) -> JSONObject:
    """Return what a webhook consumer learns of a call: no sensitive argument, no secret."""
    return {
        "id": str(call.pk),
        "status": call.status,
        "risk_tier": call.risk_tier,
        "risk_reasons": call.risk_reasons,
        "arguments": render.shown_arguments(call),
        "arguments_hash": call.arguments_hash,
        "tool_version": call.tool_version,
        "expires_at": call.expires_at.isoformat() if call.expires_at else None,
        "url": render.card(call).call_url,
    }


def signed_headers(delivery: Delivery, body: str, now: datetime | None = None) -> dict[str, str]:
    """Return the Standard Webhooks headers for `body`, signed with the endpoint's secret."""
    now = now or datetime.now(UTC)
    signature = Webhook(delivery.channel.secret).sign(msg_id=str(delivery.pk), timestamp=now, data=body)
    return {
        "content-type": CONTENT_TYPE,
        "webhook-id": str(delivery.pk),
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signature,
    }


def send(delivery: Delivery, call: ToolCall | None) -> JSONObject:
    """POST the signed CloudEvent; ChannelError unless the endpoint answered 2xx."""
    body = orjson.dumps(cloud_event(delivery, call)).decode()
    try:
        headers = signed_headers(delivery, body)
    except (ValueError, TypeError, RuntimeError, EmptyWebhookSecretError) as exc:  # the channel's secret is malformed
        raise ChannelError(f"the webhook secret is not a Standard Webhooks secret: {exc}") from exc
    try:
        response = httpx.post(delivery.channel.url, content=body.encode(), headers=headers, timeout=TIMEOUT_SECONDS)
    except httpx.HTTPError as exc:
        raise ChannelError(f"endpoint unreachable: {exc}") from exc
    if not response.is_success:
        raise ChannelError(f"endpoint answered {response.status_code}: {response.text[:200]}")
    return {"status": response.status_code}
