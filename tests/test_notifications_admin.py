"""Channels in the admin and from the command line: write-only secrets, routes, the test event, the delivery log."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from audit.models import Event
from audit.sequencer import seal_all
from notifications.models import Channel, Delivery, DeliveryStatus, EventType, Kind, Route
from tests.admin_client import AdminBrowser
from tests.notification_peers import WebhookReceiver

SECRET = "whsec_" + base64.b64encode(os.urandom(24)).decode()


def run(*args: str) -> str:
    out = StringIO()
    call_command("channel", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_channel_add_routes_every_event_of_tier_2_and_up_unless_told_otherwise() -> None:
    run("add", "email", "team-mail", "--to", "a@example.com", "b@example.com")
    run("add", "slack", "team-slack", "--token", "xoxb-1", "--channel", "C1", "--signing-secret", "s3cr3t")
    run(
        "add",
        "webhook",
        "siem",
        "--url",
        "https://siem.example.com/in",
        "--secret",
        SECRET,
        "--events",
        "call.succeeded",
        "call.failed",
        "--min-tier",
        "0",
    )
    mail, slack, hook = (Channel.objects.get(name=n) for n in ("team-mail", "team-slack", "siem"))
    assert mail.email_to == ["a@example.com", "b@example.com"]
    assert (slack.secret, slack.signing_secret, slack.slack_channel) == ("xoxb-1", "s3cr3t", "C1")
    assert list(mail.routes.values_list("events", "min_tier")) == [([], 2)]
    assert list(hook.routes.values_list("events", "min_tier")) == [(["call.succeeded", "call.failed"], 0)]
    with pytest.raises(CommandError, match="exists already"):
        run("add", "email", "team-mail", "--to", "c@example.com")


@pytest.mark.django_db
def test_channel_list_says_what_each_channel_is_and_never_a_secret() -> None:
    run("add", "webhook", "siem", "--url", "https://siem.example.com/in", "--secret", SECRET)
    rows = json.loads(run("list", "--json"))
    assert rows == [
        {
            "name": "siem",
            "kind": "webhook",
            "enabled": True,
            "target": "https://siem.example.com/in",
            "health": "ok",
            "routes": [{"events": [], "min_tier": 2, "tools": [], "agents": []}],
        }
    ]
    assert SECRET not in run("list") and "siem" in run("list")
    run("add", "slack", "team-slack", "--token", "xoxb-1", "--channel", "C1", "--signing-secret", "s3cr3t")
    slack = Channel.objects.get(name="team-slack")
    [listed] = [row for row in json.loads(run("list", "--json")) if row["name"] == "team-slack"]
    assert listed["interactivity_url"].endswith(f"/notifications/slack/{slack.pk}/interactions/")
    assert "xoxb-1" not in run("list", "--json") and "s3cr3t" not in run("list")


@pytest.mark.django_db(transaction=True)
def test_channel_test_sends_a_signed_test_event_and_fails_loudly_when_the_endpoint_is_down(
    webhook_receiver: Callable[..., WebhookReceiver], tmp_path: Any
) -> None:
    receiver = webhook_receiver(SECRET)
    run("add", "webhook", "siem", "--url", receiver.url, "--secret", SECRET)
    assert "delivered" in run("test", "siem")
    [line] = receiver.processed()
    assert line["verified"] and line["type"] == "gatehouse.test"
    receiver.stop()
    with pytest.raises(CommandError, match="not delivered"):
        run("test", "siem")


@pytest.mark.django_db
def test_the_admin_never_shows_a_secret_keeps_it_when_left_blank_and_audits_without_it() -> None:
    admin = AdminBrowser()
    channel = Channel.objects.create(name="hook", kind=Kind.WEBHOOK, url="https://h.example.com/", secret=SECRET)
    url = f"/admin/notifications/channel/{channel.pk}/change/"
    page = admin.get(url).content.decode()
    assert SECRET not in page and "leave blank to keep" in page
    response = admin.submit(url, {"url": "https://h2.example.com/", "secret": ""})
    assert response.status_code == 302
    channel.refresh_from_db()
    assert channel.url == "https://h2.example.com/" and channel.secret == SECRET
    seal_all()  # in chain order: sealed, as the sequencer does within a second
    event = Event.objects.filter(action__startswith="admin.").order_by("-seq").first() or Event.objects.latest("seq")
    assert SECRET not in json.dumps(event.data)


@pytest.mark.django_db
def test_send_test_event_queues_a_delivery_and_the_log_shows_its_status_and_error() -> None:
    admin = AdminBrowser()
    channel = Channel.objects.create(name="hook", kind=Kind.WEBHOOK, url="https://h.example.com/", secret=SECRET)
    Route.objects.create(channel=channel)
    response = admin.post(
        "/admin/notifications/channel/", {"action": "send_test_event", "_selected_action": [channel.pk]}
    )
    assert response.status_code == 302
    delivery = Delivery.objects.get(channel=channel, event_type=EventType.TEST)
    Delivery.objects.filter(pk=delivery.pk).update(
        status=DeliveryStatus.FAILED, attempts=8, last_error="endpoint answered 503"
    )
    log = admin.get("/admin/notifications/delivery/").content.decode()
    assert "endpoint answered 503" in log and "Failed" in log
    assert "failing (1)" in admin.get("/admin/notifications/channel/").content.decode()


@pytest.mark.django_db
def test_the_overview_names_a_failing_channel(console: Callable[[str], Any]) -> None:
    channel = Channel.objects.create(name="ops-hook", kind=Kind.WEBHOOK, url="https://h.example.com/", secret=SECRET)
    alice = console("alice")
    assert 'id="channel-alerts"' not in alice.get("/overview/").content.decode()
    Delivery.objects.create(
        channel=channel, event_type=EventType.TEST, event_key="t1", status=DeliveryStatus.FAILED, attempts=8
    )
    page = alice.get("/overview/").content.decode()
    assert 'id="channel-alerts"' in page and "ops-hook" in page and "1 gave up" in page
