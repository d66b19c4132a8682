"""A pending call's preview arrives after the proposal; its panel fetches it without a reload."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from approvals.models import ToolCall
from tests.browser import Console
from tests.browser import propose_refund as propose
from tests.conftest import AgentApi

pytestmark = pytest.mark.django_db


def test_the_preview_panel_polls_until_the_worker_has_stored_the_preview(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    call = propose(support, 30000, "k-preview-later")
    alice = console("alice")
    waiting = alice.get(f"/calls/{call.pk}/").content.decode()
    assert 'id="preview-panel"' in waiting and 'hx-trigger="every 1s"' in waiting
    assert "Computing the preview" in waiting

    preview = {"summary": "Refund R$ 300,00", "before": {"refunded": 0}, "after": {"refunded": 30000}}
    ToolCall.objects.filter(pk=call.pk).update(preview=preview)  # what the worker's task stores
    ready = alice.get(f"/calls/{call.pk}/", htmx=True).content.decode()
    assert 'id="preview-panel"' in ready and 'hx-trigger="every 1s"' not in ready
    assert "Refund R$ 300,00" in ready
