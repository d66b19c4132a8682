"""Outgoing webhooks with real processes: a consumer process verifies every Standard Webhooks signature and
acts on each event exactly once, through a 500, a worker killed mid-delivery, and an endpoint that was down."""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Callable
from typing import Any

import pytest

from approvals.states import Status
from notifications.models import Channel, Delivery, DeliveryStatus, Kind, Route
from tests.browser import propose_refund
from tests.conftest import AgentApi
from tests.notification_peers import SmtpServer, WebhookReceiver
from tests.processes import CeleryWorker, wait_until

pytestmark = [pytest.mark.worker]

SECRET = "whsec_" + base64.b64encode(os.urandom(24)).decode()
# Short: a retry comes after a second, a dead worker's lease runs out after three.
FAST = {"GATEHOUSE_NOTIFY_BACKOFF_SECONDS": "1", "GATEHOUSE_NOTIFY_LEASE_SECONDS": "3"}


def hook_channel(url: str, **route: Any) -> Channel:
    channel = Channel.objects.create(name="ops-hook", kind=Kind.WEBHOOK, url=url, secret=SECRET)
    Route.objects.create(channel=channel, **{"min_tier": 2, **route})
    return channel


@pytest.fixture
def worker_env(live_server: Any, secrets_key: dict[str, str]) -> dict[str, str]:
    return {**FAST, **secrets_key, "GATEHOUSE_SITE_URL": live_server.url}


def test_each_event_reaches_the_consumer_signed_once_even_after_a_500(
    webhook_receiver: Callable[..., WebhookReceiver],
    start_worker: Callable[..., CeleryWorker],
    worker_env: dict[str, str],
    support: AgentApi,
    console: Callable[[str], Any],
    demo_services: str,
) -> None:
    receiver = webhook_receiver(SECRET, "--fail-first", "1")
    hook_channel(receiver.url)
    start_worker(**worker_env)
    call = propose_refund(support, 30000, "hook-500", pedido="PED-00000004")
    console("alice").approve(call)
    wait_until(lambda: {"gatehouse.call.pending", "gatehouse.call.decided"} <= types(receiver), timeout=30)
    requests = receiver.requests()
    assert requests[0]["answered"] == 500  # the first attempt failed …
    assert all(line["verified"] for line in requests)  # … and every request was signed
    processed = receiver.processed()
    assert len({line["id"] for line in processed}) == len(processed)  # no event acted on twice
    pending = next(line for line in processed if line["type"] == "gatehouse.call.pending")
    assert pending["event"]["specversion"] == "1.0" and pending["event"]["id"] == pending["id"]
    assert pending["event"]["subject"] == str(call.pk)
    assert pending["event"]["data"]["call"]["arguments"]["valor_centavos"] == 30000
    first = Delivery.objects.get(pk=requests[0]["id"])
    assert first.status == DeliveryStatus.DELIVERED and first.attempts == 2


def types(receiver: WebhookReceiver) -> set[str]:
    return {line["type"] for line in receiver.processed()}


def test_a_worker_killed_mid_delivery_leaves_the_event_delivered_once_under_the_same_id(
    webhook_receiver: Callable[..., WebhookReceiver],
    start_worker: Callable[..., CeleryWorker],
    worker_env: dict[str, str],
    support: AgentApi,
) -> None:
    receiver = webhook_receiver(SECRET, "--hang-first", "30")
    hook_channel(receiver.url, events=["call.pending"])
    worker = start_worker(**worker_env)
    call = propose_refund(support, 30000, "hook-kill")
    wait_until(lambda: any(line["answered"] == "hanging" for line in receiver.requests()), timeout=30)
    worker.kill()  # the consumer got the event; the worker never heard its answer
    start_worker(**worker_env)
    wait_until(lambda: any(line["answered"] == 200 for line in receiver.requests()), timeout=30)
    delivery = Delivery.objects.get(call_id=call.pk)
    assert [line["id"] for line in receiver.requests()] == [str(delivery.pk)] * 2  # sent again, same id
    assert [line["id"] for line in receiver.processed()] == [str(delivery.pk)]  # acted on once
    wait_until(lambda: Delivery.objects.get(pk=delivery.pk).status == DeliveryStatus.DELIVERED, timeout=10)


def test_a_channel_that_is_down_neither_slows_nor_fails_a_proposal_and_delivers_later(
    webhook_receiver: Callable[..., WebhookReceiver],
    smtp_server: SmtpServer,
    start_worker: Callable[..., CeleryWorker],
    worker_env: dict[str, str],
    support: AgentApi,
) -> None:
    smtp_server.stop()
    receiver = webhook_receiver(SECRET, running=False)  # nothing listens on its port yet
    hook_channel(receiver.url, events=["call.pending"])
    mail = Channel.objects.create(name="mail", kind=Kind.EMAIL, email_to=["ops@example.com"])
    Route.objects.create(channel=mail, events=["call.pending"])
    start_worker(**worker_env, EMAIL_URL=smtp_server.url)
    started = time.monotonic()
    calls = [propose_refund(support, 30000, f"down-{n}") for n in range(3)]
    elapsed = time.monotonic() - started
    assert all(call.status == Status.PENDING_APPROVAL for call in calls)
    assert elapsed < 3, elapsed  # nothing waited for the mail server or the endpoint
    wait_until(lambda: Delivery.objects.filter(attempts__gte=2, status=DeliveryStatus.PENDING).count() == 6)
    receiver.start()
    smtp_server.start()
    wait_until(lambda: Delivery.objects.filter(status=DeliveryStatus.DELIVERED).count() == 6, timeout=40)
    assert len(receiver.processed()) == 3
    assert len(smtp_server.messages()) == 3
