"""A pending call's dry run is asked for when a reviewer first opens it, not when the agent proposes it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from approvals.models import ToolCall
from demo.models import Order
from tests.browser import Console
from tests.browser import propose_refund as propose
from tests.conftest import AgentApi

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_proposal_asks_the_downstream_nothing_and_the_page_fetches_the_preview(
    support: AgentApi, console: Callable[[str], Console], demo_services: str
) -> None:
    call = propose(support, 30000, "k-preview-later", pedido="PED-00000004")
    assert call.preview is None  # the agent's proposal did not wait for a dry run

    alice = console("alice")
    page = alice.get(f"/calls/{call.pk}/").content.decode()
    assert 'id="preview-panel"' in page and f'hx-get="/calls/{call.pk}/preview/"' in page
    assert 'hx-trigger="load"' in page

    panel = alice.get(f"/calls/{call.pk}/preview/", htmx=True).content.decode()
    assert 'id="preview-panel"' in panel and "hx-get" not in panel
    assert "R$ 300,00" in panel
    call.refresh_from_db()
    assert call.preview["after"]["refunded_centavos"] == 30000
    assert Order.objects.get(order_id="PED-00000004").refunded_centavos == 0  # a dry run changes nothing


def test_the_preview_shows_the_resource_as_it_is_when_the_reviewer_looks(
    support: AgentApi, console: Callable[[str], Console], demo_services: str
) -> None:
    call = propose(support, 30000, "k-preview-fresh", pedido="PED-00000004")
    Order.objects.filter(order_id="PED-00000004").update(refunded_centavos=5000)  # after the proposal

    panel = console("alice").get(f"/calls/{call.pk}/preview/", htmx=True).content.decode()

    assert "R$ 50,00" in panel and "R$ 350,00" in panel  # before: 50 already refunded; after: 50 + 300
    call.refresh_from_db()
    assert call.preview["before"]["refunded_centavos"] == 5000


def test_a_stored_preview_is_shown_without_asking_again(
    support: AgentApi, console: Callable[[str], Console], settings: Any
) -> None:
    call = propose(support, 30000, "k-preview-stored")
    stored = {"summary": "Refund R$ 300,00", "before": {"refunded": 0}, "after": {"refunded": 30000}}
    ToolCall.objects.filter(pk=call.pk).update(preview=stored)
    settings.GATEHOUSE_DEMO_SERVICES_URL = "http://127.0.0.1:9"  # nothing listens: asking would fail

    page = console("alice").get(f"/calls/{call.pk}/").content.decode()

    assert 'id="preview-panel"' in page and "/preview/" not in page
    assert "Refund R$ 300,00" in page


def test_a_failed_dry_run_is_shown_and_asked_again_next_time(
    support: AgentApi, console: Callable[[str], Console], settings: Any
) -> None:
    call = propose(support, 30000, "k-preview-down")
    settings.GATEHOUSE_DEMO_SERVICES_URL = "http://127.0.0.1:9"  # the downstream is down

    panel = console("alice").get(f"/calls/{call.pk}/preview/", htmx=True).content.decode()

    assert "No preview:" in panel and "unreachable" in panel
    assert f'hx-get="/calls/{call.pk}/preview/"' in panel and "Ask again" in panel  # no reload needed
    call.refresh_from_db()
    assert call.preview is None  # not stored: the next look asks again
