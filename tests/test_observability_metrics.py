"""`/metrics`: Prometheus text computed from the database, only for the holder of the metrics token."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import transaction
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from approvals import lifecycle
from approvals.models import ToolCall
from audit.chain import record
from audit.models import ActorKind
from tests.conftest import refund
from tests.processes import CeleryWorker, wait_until

TOKEN = "metrics-token-for-tests"


def scrape(client: Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Return every sample of a scrape as {(name, sorted labels): value}."""
    response = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def reviewer() -> Any:
    user = get_user_model().objects.create_user("rita", password="x")
    user.user_permissions.add(Permission.objects.get(codename="review_toolcall"))
    return get_user_model().objects.get(pk=user.pk)  # fresh: permissions are cached per instance


def test_without_a_configured_token_there_is_no_metrics_endpoint(db: None, settings: Any) -> None:
    settings.GATEHOUSE_METRICS_TOKEN = ""

    assert Client().get("/metrics").status_code == 404
    assert Client().get("/metrics", headers={"Authorization": "Bearer "}).status_code == 404


@pytest.mark.parametrize("authorization", [None, "Bearer wrong", f"Basic {TOKEN}", f"Bearer {TOKEN}x", TOKEN])
def test_metrics_are_refused_without_the_token(db: None, settings: Any, authorization: str | None) -> None:
    settings.GATEHOUSE_METRICS_TOKEN = TOKEN
    headers = {"Authorization": authorization} if authorization else {}

    response = Client().get("/metrics", headers=headers)

    assert response.status_code == 401
    assert b"gatehouse_" not in response.content


def test_a_scrape_with_nothing_done_reports_zeros(db: None, settings: Any) -> None:
    settings.GATEHOUSE_METRICS_TOKEN = TOKEN

    samples = scrape(Client())

    assert samples[("gatehouse_executions_total", (("status", "succeeded"),))] == 0
    assert samples[("gatehouse_breaker_openings_total", ())] == 0
    assert samples[("gatehouse_sweeper_resends_total", ())] == 0
    assert samples[("gatehouse_notification_failures_total", ())] == 0
    assert samples[("gatehouse_time_to_decision_seconds_count", ())] == 0
    assert not [key for key in samples if key[0] == "gatehouse_calls_pending"]


@pytest.mark.worker
def test_metrics_reflect_a_held_call_its_decision_and_its_execution(
    celery_worker: CeleryWorker, demo_services: str, agent_api: Any, settings: Any
) -> None:
    settings.GATEHOUSE_METRICS_TOKEN = TOKEN
    scraper = Client()
    held = agent_api().propose(refund(35000, pedido="PED-00000005", idempotency_key="held-1")).json()
    assert held["status"] == "pending_approval"

    while_held = scrape(scraper)

    assert while_held[("gatehouse_calls_pending", (("tier", "2"),))] == 1
    assert while_held[("gatehouse_decisions_total", (("decision", "approved"),))] == 0
    assert while_held[("gatehouse_time_to_decision_seconds_count", ())] == 0

    assert lifecycle.approve(ToolCall.objects.get(pk=held["id"]), reviewer())
    wait_until(lambda: ToolCall.objects.filter(pk=held["id"], status="succeeded").exists(), timeout=20)
    after = scrape(scraper)

    assert ("gatehouse_calls_pending", (("tier", "2"),)) not in after
    assert after[("gatehouse_decisions_total", (("decision", "approved"),))] == 1
    assert after[("gatehouse_time_to_decision_seconds_count", ())] == 1
    assert after[("gatehouse_time_to_decision_seconds_bucket", (("le", "60.0"),))] == 1
    assert after[("gatehouse_executions_total", (("status", "succeeded"),))] == 1
    assert after[("gatehouse_executions_total", (("status", "failed"),))] == 0


def test_metrics_count_breaker_openings_and_sweeper_resends_from_the_audit_chain(db: None, settings: Any) -> None:
    settings.GATEHOUSE_METRICS_TOKEN = TOKEN
    with transaction.atomic():
        for action in ("circuit.opened", "call.requeued", "call.requeued"):
            record(action, actor=(ActorKind.SYSTEM, "gatehouse"))

    samples = scrape(Client())

    assert samples[("gatehouse_breaker_openings_total", ())] == 1
    assert samples[("gatehouse_sweeper_resends_total", ())] == 2
