"""Slack's side of deciding: the request signature, the click, who the Slack user is in Gatehouse.

A Slack user decides as the Gatehouse user with the same email, when Slack says that
email is confirmed (users.info), or as the reviewer who linked them once through a
signed link. Nothing else maps them: a click never names its own Gatehouse user.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from django.contrib.auth.models import User
from django.core import signing
from django.db import IntegrityError, transaction
from django.urls import reverse
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.webhook import WebhookClient

from notifications import deciding, outbox, render
from notifications.channels import slack
from notifications.links import Bound
from notifications.models import Channel, SlackIdentity

LINK_SALT = "notifications.slack-link"
LINK_MAX_AGE_SECONDS = 3600
REPLY = "notifications.tasks.reply_slack"


def verified(channel: Channel, body: bytes, headers: Mapping[str, str]) -> bool:
    """Return whether Slack signed this request with the channel's signing secret, within five minutes."""
    try:
        return SignatureVerifier(channel.signing_secret).is_valid_request(body, dict(headers))
    except ValueError:  # a timestamp that is not a number
        return False


@dataclass(frozen=True)
class Click:
    """A button click (block_actions): who, which button, on what binding, and where to answer."""

    slack_user_id: str
    team_id: str
    action: str
    bound: Bound
    response_url: str

    @classmethod
    def parse(cls, payload: str) -> Click:
        """Return the click a block_actions payload describes; ValueError for anything else."""
        data = json.loads(payload)
        if not isinstance(data, dict) or data.get("type") != "block_actions" or not data.get("actions"):
            raise ValueError("not a button click")
        action = data["actions"][0]
        return cls(
            slack_user_id=str(data["user"]["id"]),
            team_id=str((data.get("team") or {}).get("id") or ""),
            action=str(action.get("action_id", "")),
            bound=Bound.from_value(json.loads(action.get("value") or "null")),
            response_url=str(data.get("response_url") or ""),
        )


def answer(channel: Channel, click: Click) -> str:
    """Decide as the Slack user's Gatehouse user; return the sentence the user reads."""
    user = user_for(channel, click.team_id, click.slack_user_id)
    if user is None:
        url = render.site_url(reverse("notifications:slack_link", args=[link_token(click)]))
        return f"Refused: your Slack account is not linked to a Gatehouse reviewer. Link it once: {url}"
    reason = f"Rejected in Slack by {user.get_username()}."
    return deciding.decide(click.bound, user, click.action, reason).text


def user_for(channel: Channel, team_id: str, slack_user_id: str) -> User | None:
    """Return the active Gatehouse user a Slack user decides as, mapping them by confirmed email on first use."""
    identity = SlackIdentity.objects.select_related("user").filter(team_id=team_id, slack_user_id=slack_user_id).first()
    if identity is not None:
        return identity.user if identity.user.is_active else None
    user = by_confirmed_email(channel, slack_user_id)
    if user is not None:
        link({"t": team_id, "u": slack_user_id}, user)
    return user


def by_confirmed_email(channel: Channel, slack_user_id: str) -> User | None:
    """Return the one active user whose email Slack confirms for this Slack user (users.info), or None."""
    try:
        profile = slack.client(channel).users_info(user=slack_user_id)["user"]
    except (SlackApiError, SlackClientError, OSError, KeyError, TypeError):
        return None
    email = (profile.get("profile") or {}).get("email") or ""
    if not email or profile.get("is_email_confirmed") is not True:
        return None
    users = list(User.objects.filter(email__iexact=email, is_active=True)[:2])
    return users[0] if len(users) == 1 else None


def link_token(click: Click) -> str:
    return signing.dumps({"t": click.team_id, "u": click.slack_user_id}, salt=LINK_SALT)


def read_link_token(token: str) -> dict[str, str]:
    """Return the Slack user a linking token names; signing.BadSignature if forged or older than an hour."""
    value = signing.loads(token, salt=LINK_SALT, max_age=LINK_MAX_AGE_SECONDS)
    if not isinstance(value, dict) or not isinstance(value.get("u"), str):
        raise ValueError("not a Slack link")
    return {"t": str(value.get("t") or ""), "u": value["u"]}


def link(who: Mapping[str, str], user: User) -> None:
    """Map the Slack user to `user` (a Slack user already mapped keeps their first mapping)."""
    try:
        with transaction.atomic():
            SlackIdentity.objects.get_or_create(team_id=who["t"], slack_user_id=who["u"], defaults={"user": user})
    except IntegrityError:  # mapped concurrently: the first mapping stands
        return


def reply_later(channel_id: int, response_url: str, text: str) -> None:
    """Have a worker tell the clicking user the outcome (ephemeral), through the click's response_url."""
    outbox.send_task(REPLY, {"channel_id": channel_id, "response_url": response_url, "text": text})


def reply(response_url: str, text: str) -> None:
    """Post an ephemeral answer to a click (Slack keeps the original message as it is)."""
    WebhookClient(response_url, timeout=slack.TIMEOUT_SECONDS).send(
        text=text, response_type="ephemeral", replace_original=False
    )
