"""Reminders at 50 % and 90 % of the approval window and the escalation after 90 %, from beat, on time;
nothing for a call decided before its reminder. Observed by webhook consumer processes."""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from notifications.models import Channel, Kind, Route
from tests.browser import Console, propose_refund
from tests.conftest import AgentApi
from tests.notification_peers import WebhookReceiver
from tests.processes import CeleryWorker, wait_until
from toolcatalog.models import RiskTier

pytestmark = [pytest.mark.worker]

SECRET = "whsec_" + base64.b64encode(os.urandom(24)).decode()
WINDOW = 10.0  # seconds: reminders due at 5 s and 9 s, the escalation at 9 s
SLACK = 2.5  # beat sweeps every second; a delivery takes well under a second more


def hook(name: str, url: str, events: list[str]) -> None:
    channel = Channel.objects.create(name=name, kind=Kind.WEBHOOK, url=url, secret=SECRET)
    Route.objects.create(channel=channel, events=events, min_tier=2)


def test_reminders_and_the_escalation_fire_on_time_and_never_for_a_call_decided_before(
    webhook_receiver: Callable[..., WebhookReceiver],
    start_worker: Callable[..., CeleryWorker],
    secrets_key: dict[str, str],
    live_server: Any,
    support: AgentApi,
    console: Callable[[str], Console],
) -> None:
    RiskTier.objects.filter(level=2).update(approval_window=timedelta(seconds=WINDOW))
    reviewers, on_call = webhook_receiver(SECRET), webhook_receiver(SECRET)
    hook("reviewers", reviewers.url, ["call.reminder"])
    hook("on-call", on_call.url, ["call.escalated"])
    start_worker(GATEHOUSE_SITE_URL=live_server.url, **secrets_key)
    waiting = propose_refund(support, 30000, "remind-waiting")
    decided = propose_refund(support, 30000, "remind-decided", pedido="PED-00000002")
    assert console("bob").post(f"/calls/{decided.pk}/reject/", {"reason": "Duplicate."}).status_code == 302
    proposed_at = waiting.created_at.timestamp()

    reminders = wait_until(lambda: len(reviewers.processed()) >= 2 and reviewers.processed(), timeout=WINDOW + 10)
    escalations = wait_until(on_call.processed, timeout=10)
    percents = [line["event"]["data"]["event"]["percent"] for line in reminders]
    assert percents == [50, 90]
    assert WINDOW * 0.5 <= reminders[0]["at"] - proposed_at <= WINDOW * 0.5 + SLACK
    assert WINDOW * 0.9 <= reminders[1]["at"] - proposed_at <= WINDOW * 0.9 + SLACK
    assert [line["type"] for line in escalations] == ["gatehouse.call.escalated"]
    assert WINDOW * 0.9 <= escalations[0]["at"] - proposed_at <= WINDOW * 0.9 + SLACK
    subjects = {line["event"]["subject"] for line in [*reminders, *escalations]}
    assert subjects == {str(waiting.pk)}  # the call decided at once was never reminded of
    wait_until(lambda: len(reviewers.requests()) == 2 and len(on_call.requests()) == 1, timeout=5)
