"""Slack through slack_sdk's WebClient: Block Kit messages with Approve / Reject, updated in place when decided.

A call's first message (call.pending) carries the buttons; reminders, escalations and
outcomes are replies in its thread, and a decision made anywhere rewrites that first
message without buttons. Each button carries the call id, the arguments hash and the
tool version it was rendered for (notifications.links.Bound).
"""

from __future__ import annotations

import json

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError

from approvals.models import ToolCall
from audit.typealiases import JSONObject
from notifications import links, render
from notifications.channels import ChannelError
from notifications.models import Channel, Delivery, DeliveryStatus, EventType

DEFAULT_API_URL = "https://slack.com/api/"
TIMEOUT_SECONDS = 10
ASKING = frozenset({EventType.PENDING})
# Events that end the wait: the first message is rewritten without its buttons.
ENDING = frozenset({EventType.DECIDED})


def client(channel: Channel) -> WebClient:
    """Return a Web API client for the channel's app (its base URL: the real API unless set)."""
    base = channel.api_url or DEFAULT_API_URL
    return WebClient(token=channel.secret, base_url=base.rstrip("/") + "/", timeout=TIMEOUT_SECONDS)


def send(delivery: Delivery, call: ToolCall | None) -> JSONObject:
    """Post, reply in the call's thread, or update its first message; ChannelError if Slack did not take it."""
    try:
        return _send(client(delivery.channel), delivery, call)
    except SlackApiError as exc:
        raise ChannelError(f"Slack answered {exc.response.get('error', exc.response.status_code)}") from exc
    except (SlackClientError, OSError) as exc:
        raise ChannelError(f"Slack unreachable: {exc}") from exc


def _send(web: WebClient, delivery: Delivery, call: ToolCall | None) -> JSONObject:
    channel = delivery.channel.slack_channel
    text = _text(delivery, call)
    if call is None:
        answer = web.chat_postMessage(channel=channel, text=text, blocks=plain_blocks(text))
        return {"channel": answer["channel"], "ts": answer["ts"]}
    first = first_messages(delivery.channel, call)
    if delivery.event_type in ENDING and first:
        for message in first:
            web.chat_update(channel=message["channel"], ts=message["ts"], text=text, blocks=call_blocks(call, False))
        return {"updated": first}
    thread = first[-1]["ts"] if first and delivery.event_type not in ASKING else None
    blocks = call_blocks(call, delivery.event_type in ASKING, title=render.TITLES.get(delivery.event_type, ""))
    answer = web.chat_postMessage(channel=channel, text=text, blocks=blocks, thread_ts=thread)
    return {"channel": answer["channel"], "ts": answer["ts"]}


def first_messages(channel: Channel, call: ToolCall) -> list[JSONObject]:
    """Return the call's delivered call.pending messages on this channel ({channel, ts}), oldest first."""
    rows = Delivery.objects.filter(
        channel=channel, call_id=call.pk, event_type=EventType.PENDING, status=DeliveryStatus.DELIVERED
    ).order_by("created_at")
    return [row.external for row in rows if row.external.get("ts")]


def _text(delivery: Delivery, call: ToolCall | None) -> str:
    """Return the notification's plain text (what a phone's notification shows)."""
    if call is None:
        who = " ".join(str(delivery.payload.get(name) or "") for name in ("tool", "agent")).strip()
        return f"{render.TITLES.get(delivery.event_type, delivery.event_type)} {who}".strip()
    return render.subject(delivery.event_type, render.card(call)).removeprefix("[Gatehouse] ")


def plain_blocks(text: str) -> list[JSONObject]:
    return [{"type": "section", "text": {"type": "mrkdwn", "text": _escape(text)}}]


def call_blocks(call: ToolCall, asking: bool, title: str = "") -> list[JSONObject]:
    """Return the Block Kit of a call: tool, agent, key argument, tier and why, time left, a link; buttons if asking."""
    c = render.card(call)
    heading = title or call.get_status_display()  # a rewritten first message says how the call ended
    blocks: list[JSONObject] = [
        {"type": "header", "text": {"type": "plain_text", "text": f"{heading}: {c.tool}"[:150]}},
        {"type": "section", "fields": _fields(c)},
    ]
    if c.reasons:
        reasons = "\n".join(f"• {_escape(reason)}" for reason in c.reasons)
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": f"*Why tier {c.tier}*\n{reasons}"}})
    link = f"<{c.call_url}|Open the call in Gatehouse>"
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": link}]})
    if asking:
        blocks.append(actions(call))
    return blocks


def _fields(c: render.CallCard) -> list[JSONObject]:
    key = f"{c.key_argument[0]}: {c.key_argument[1]}" if c.key_argument else "—"
    values = [
        ("Agent", c.agent),
        ("Key argument", key),
        ("Tier", str(c.tier) if c.tier is not None else "—"),
        ("Status", c.status),
        ("Time left", c.time_left or "—"),
    ]
    return [{"type": "mrkdwn", "text": f"*{name}*\n{_escape(value)}"} for name, value in values]


def actions(call: ToolCall) -> JSONObject:
    """Return the Approve / Reject buttons, each bound to the call as rendered."""
    value = json.dumps(links.bound_to(call).as_value(), separators=(",", ":"))
    return {
        "type": "actions",
        "block_id": "gatehouse_decision",
        "elements": [
            {
                "type": "button",
                "action_id": "approve",
                "style": "primary",
                "text": {"type": "plain_text", "text": "Approve"},
                "value": value,
            },
            {
                "type": "button",
                "action_id": "reject",
                "style": "danger",
                "text": {"type": "plain_text", "text": "Reject"},
                "value": value,
            },
        ],
    }


def _escape(text: str) -> str:
    """Escape what Slack's mrkdwn treats as markup (&, <, >), so argument values can't make links or mentions."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
