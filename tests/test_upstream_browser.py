"""A reviewer decides upstream MCP calls in the browser: what the page says, and what reaches the upstream.

Both transports. Without a preview tool the page says plainly that the upstream
offers no dry run and shows the arguments and the tool's annotations; with one, its
answer is the "before", and it reads the effect back after the call.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from playwright.sync_api import Page, expect

from agents.provisioning import create_or_update_agent
from audit.models import Event
from tests.conftest import AgentApi
from tests.processes import CeleryWorker
from tests.upstream_peers import CANCEL, SEARCH, Peer
from toolcatalog.upstreams import UpstreamTool
from toolcatalog.upstreams_sync import sync

pytestmark = [pytest.mark.browser, pytest.mark.worker]

RUN_TIMEOUT = 30_000  # ms


def in_thread(work: Any) -> None:
    """Run `work` in a thread of its own: Playwright keeps an event loop in this one, and a sync runs its own."""
    failures: list[BaseException] = []

    def target() -> None:
        try:
            work()
        except BaseException as exc:  # re-raised in the test's thread
            failures.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(timeout=60)
    if failures:
        raise failures[0]


def box_agent(peer: Peer) -> AgentApi:
    peer.offer(SEARCH, CANCEL)
    in_thread(lambda: sync(peer.register("box")))
    _, token = create_or_update_agent("box-agent", {"box_cancel_order": 3}, owner_username="admin")
    return AgentApi(Client(), token)


def pending(api: AgentApi, order: str) -> str:
    body = api.propose({"tool": "box_cancel_order", "arguments": {"order_id": order}, "idempotency_key": order}).json()
    assert body["status"] == "pending_approval", body
    return body["id"]


def approve(page: Page) -> None:
    page.get_by_role("button", name="Approve").click()
    expect(page.locator("#call-live .status")).to_have_text("Succeeded", timeout=RUN_TIMEOUT)


def test_a_destructive_upstream_call_is_approved_in_the_browser_and_reaches_the_upstream_once(
    celery_worker: CeleryWorker, peer: Peer, people: dict[str, User], log_in: Any
) -> None:
    api = box_agent(peer)
    call_id = pending(api, "OR-5")
    assert peer.calls() == []

    page = log_in("alice")
    page.goto(f"/calls/{call_id}/")
    preview = page.locator("#preview-panel")
    expect(preview).to_contain_text("offers no dry run")
    expect(preview).to_contain_text("destructive, not idempotent write")
    expect(page.locator("#arguments-table")).to_contain_text("OR-5")
    approve(page)

    assert peer.calls() == [{"name": "cancel_order", "arguments": {"order_id": "OR-5"}}]
    assert api.get(call_id).json()["status"] == "succeeded"


def test_a_preview_tool_shows_the_before_and_reads_the_effect_back(
    celery_worker: CeleryWorker, http_peer: Peer, people: dict[str, User], log_in: Any
) -> None:
    api = box_agent(http_peer)
    UpstreamTool.objects.filter(remote_name="cancel_order").update(
        preview_tool="search_seats", preview_arguments={"event_id": "order_id"}
    )
    call_id = pending(api, "OR-6")

    page = log_in("bob")
    page.goto(f"/calls/{call_id}/")
    expect(page.locator("#preview-panel")).to_contain_text("Read with search_seats")
    expect(page.locator("#preview-panel")).to_contain_text("OR-6")
    approve(page)

    assert [c["name"] for c in http_peer.calls()] == ["search_seats", "cancel_order", "search_seats"]
    assert http_peer.calls("search_seats")[0]["arguments"] == {"event_id": "OR-6"}
    succeeded = Event.objects.get(call_id=call_id, action="call.succeeded")
    assert succeeded.data["observed"]["after"]["arguments"] == {"event_id": "OR-6"}
