"""Email through Django's email backend: a text and an HTML part, a Message-ID made of the delivery id."""

from __future__ import annotations

import smtplib

from django.conf import settings
from django.contrib.auth.models import User
from django.core.mail import EmailMultiAlternatives
from django.template.loader import render_to_string

from approvals.decisions import REVIEW_PERMISSION
from approvals.models import ToolCall
from audit.typealiases import JSONObject
from notifications import render
from notifications.channels import ChannelError
from notifications.models import Delivery, EventType, Preference

# Events a reviewer who asked for mail receives: those asking for a decision.
ASKING = frozenset({EventType.PENDING, EventType.REMINDER, EventType.ESCALATED})


def recipients(delivery: Delivery) -> list[str]:
    """Return the channel's and the route's addresses, and for a call asking for a decision every opted-in reviewer."""
    addresses = [*delivery.channel.email_to, *(delivery.route.email_to if delivery.route else [])]
    if delivery.event_type in ASKING:
        addresses += opted_in_reviewers()
    return sorted({address.strip().lower() for address in addresses if address and address.strip()})


def opted_in_reviewers() -> list[str]:
    """Return the addresses of active reviewers who asked to be mailed pending calls."""
    ids = Preference.objects.filter(email_pending=True).values_list("user_id", flat=True)
    users = User.objects.filter(pk__in=ids, is_active=True).exclude(email="")
    return [user.email for user in users if user.has_perm(REVIEW_PERMISSION)]


def send(delivery: Delivery, call: ToolCall | None) -> JSONObject:
    """Mail the delivery to its recipients; ChannelError if the mail server did not take it."""
    to = recipients(delivery)
    if not to:
        raise ChannelError("no recipients: give the channel or route an address, or let reviewers opt in")
    context = {
        "delivery": delivery,
        "payload": delivery.payload,
        "card": render.card(call) if call is not None else None,
        "title": render.TITLES.get(delivery.event_type, delivery.event_type),
        "asks": delivery.event_type in ASKING,
    }
    message = EmailMultiAlternatives(
        subject=_subject(delivery, context["card"]),
        body=render_to_string("notifications/email.txt", context),
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=to,
        headers={"Message-ID": f"<{delivery.pk}@gatehouse>", "X-Gatehouse-Event": delivery.event_type},
    )
    message.attach_alternative(render_to_string("notifications/email.html", context), "text/html")
    try:
        message.send()
    except (OSError, smtplib.SMTPException) as exc:
        raise ChannelError(f"mail server: {exc}") from exc
    return {"to": to}


def _subject(delivery: Delivery, card: render.CallCard | None) -> str:
    if card is not None:
        return render.subject(delivery.event_type, card)
    title = render.TITLES.get(delivery.event_type, delivery.event_type)
    who = " ".join(str(delivery.payload.get(name) or "") for name in ("tool", "agent")).strip()
    return f"[Gatehouse] {title}" + (f": {who}" if who else "")
