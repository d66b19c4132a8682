"""Celery tasks: thin interfaces over the outbox. Delivery is at-least-once; the claim makes a duplicate do nothing."""

from __future__ import annotations

from celery import shared_task

from notifications import intake, outbox, reminders, sending, slackapp
from notifications.receivers import ROUTE_EVENTS


@shared_task(name=outbox.DELIVER, ignore_result=True)
def deliver(*, delivery_id: str) -> None:
    """Send one delivery (a duplicate or stale message finds it taken and does nothing)."""
    sending.send_now(delivery_id)


@shared_task(name=ROUTE_EVENTS, ignore_result=True)
def route_events() -> int:
    """Route the audit events committed since the last run into deliveries; return how many were written."""
    return intake.route_new_events()


@shared_task(name="notifications.tasks.sweep", ignore_result=True)
def sweep() -> dict[str, int]:
    """Route new events (any whose message was lost) and due reminders, take back dead leases, send what is due."""
    routed = intake.route_new_events()
    counts = reminders.route_due()
    return {"routed": routed, **counts, **outbox.sweep()}


@shared_task(name=slackapp.REPLY, ignore_result=True)
def reply_slack(*, channel_id: int, response_url: str, text: str) -> None:
    """Tell a user who clicked in Slack what their click came to (ephemeral)."""
    slackapp.reply(response_url, text)
