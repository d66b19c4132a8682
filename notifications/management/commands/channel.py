"""Notification channels for scripts: `channel add email|slack|webhook NAME …`, `list [--json]`, `test NAME`."""

from __future__ import annotations

import json
from argparse import ArgumentParser

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.urls import reverse

from audit.typealiases import JSONObject, OptionValue
from notifications import outbox, sending
from notifications.admin import channel_health
from notifications.models import Channel, EventType, Kind, Route
from notifications.render import site_url

EVENT_NAMES = [choice.value for choice in EventType if choice != EventType.TEST]


class Command(BaseCommand):
    help = "Add, list and test notification channels."

    def add_arguments(self, parser: CommandParser) -> None:
        commands = parser.add_subparsers(dest="command", required=True)
        add = commands.add_parser("add", help="Add a channel, routing every event of tier ≥ 2 to it.")
        kinds = add.add_subparsers(dest="kind", required=True)
        email = kinds.add_parser("email", help="Mail addresses.")
        email.add_argument("name")
        email.add_argument("--to", nargs="+", required=True, metavar="ADDR")
        self._routing(email)
        slack = kinds.add_parser("slack", help="A Slack channel, through a Slack app's bot token.")
        slack.add_argument("name")
        slack.add_argument("--token", required=True)
        slack.add_argument("--channel", required=True)
        slack.add_argument("--signing-secret", required=True)
        slack.add_argument("--api-url", default="")
        self._routing(slack)
        webhook = kinds.add_parser("webhook", help="A CloudEvents endpoint, signed per Standard Webhooks.")
        webhook.add_argument("name")
        webhook.add_argument("--url", required=True)
        webhook.add_argument("--secret", required=True, help="whsec_… (base64 after the prefix)")
        self._routing(webhook)
        listing = commands.add_parser("list", help="List channels (never their secrets).")
        listing.add_argument("--json", action="store_true")
        test = commands.add_parser("test", help="Send a test event now and say whether the channel took it.")
        test.add_argument("name")

    @staticmethod
    def _routing(parser: ArgumentParser) -> None:
        parser.add_argument("--events", nargs="+", choices=EVENT_NAMES, default=[], metavar="EVENT")
        parser.add_argument("--min-tier", type=int, default=2, choices=range(4))

    def handle(self, *args: str, **options: OptionValue) -> None:
        command = options["command"]
        if command == "add":
            self._add(options)
        elif command == "list":
            self._list(as_json=options["json"])
        else:
            self._test(options["name"])

    def _add(self, options: dict[str, OptionValue]) -> None:
        kind, name = options["kind"], options["name"]
        if Channel.objects.filter(name=name).exists():
            raise CommandError(f"A channel named {name!r} exists already.")
        channel = Channel(name=name, kind=kind, **_fields(kind, options))
        with transaction.atomic():
            channel.full_clean()
            channel.save()
            Route.objects.create(channel=channel, events=options["events"], min_tier=options["min_tier"])
        self.stdout.write(f"Added {kind} channel {name!r}: {_routing_words(options)} → {channel.target()}")

    def _list(self, *, as_json: bool) -> None:
        # The secrets are not read (nor decrypted): a listing never needs them.
        channels = Channel.objects.defer("secret", "signing_secret").prefetch_related("routes")
        rows = [_row(channel) for channel in channels]
        if as_json:
            self.stdout.write(json.dumps(rows, indent=2))
            return
        for row in rows:
            state = "enabled" if row["enabled"] else "disabled"
            line = f"{row['name']:<24} {row['kind']:<8} {state:<9} {row['health']:<14} {row['target']}"
            if "interactivity_url" in row:
                line += f"  interactivity: {row['interactivity_url']}"
            self.stdout.write(line)

    def _test(self, name: str) -> None:
        channel = Channel.objects.filter(name=name).first()
        if channel is None:
            raise CommandError(f"No channel named {name!r}.")
        delivery = outbox.new_test_delivery(channel)
        outcome = sending.send_now(str(delivery.pk))
        delivery.refresh_from_db()
        if outcome != "delivered":
            raise CommandError(f"{name}: not delivered ({delivery.last_error or outcome}); retried by the worker.")
        self.stdout.write(f"{name}: test event {delivery.pk} delivered.")


def _fields(kind: str, options: dict[str, OptionValue]) -> dict[str, OptionValue]:
    if kind == Kind.EMAIL:
        return {"email_to": options["to"]}
    if kind == Kind.SLACK:
        return {
            "secret": options["token"],
            "slack_channel": options["channel"],
            "signing_secret": options["signing_secret"],
            "api_url": options["api_url"],
        }
    return {"url": options["url"], "secret": options["secret"]}


def _routing_words(options: dict[str, OptionValue]) -> str:
    events = ", ".join(options["events"]) or "every event"
    return f"{events} of tier ≥ {options['min_tier']}"


def _row(channel: Channel) -> JSONObject:
    """Return what `list` says of a channel; a Slack channel also says the interactivity URL its app calls."""
    routes = [
        {"events": route.events, "min_tier": route.min_tier, "tools": route.tools, "agents": route.agents}
        for route in channel.routes.all()
    ]
    return {
        "name": channel.name,
        "kind": channel.kind,
        "enabled": channel.enabled,
        "target": channel.target(),
        "health": channel_health(channel),
        "routes": routes,
        **({"interactivity_url": slack_interactivity_url(channel)} if channel.kind == Kind.SLACK else {}),
    }


def slack_interactivity_url(channel: Channel) -> str:
    return site_url(reverse("notifications:slack_interactions", args=[channel.pk]))
