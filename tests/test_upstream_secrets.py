"""An upstream's secret header value appears in no admin or console page, API response, audit event or log line.

The upstream is registered in admin as a person would (the value typed once into a
write-only input), synced from the admin action, and a call to it runs on a real worker.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from django.test import Client

from agents.provisioning import create_or_update_agent
from audit.models import Event
from tests.admin_client import AdminBrowser
from tests.conftest import AgentApi
from tests.processes import CeleryWorker, wait_until
from tests.upstream_peers import HOLD, SEARCH, SECRET_TOKEN, Peer
from toolcatalog.models import Tool
from toolcatalog.upstreams import SyncStatus, Upstream, UpstreamValue

pytestmark = pytest.mark.worker


def register_in_admin(admin: AdminBrowser, peer: Peer) -> Upstream:
    """Add the upstream through its admin form, its Authorization header typed into the write-only input."""
    response = admin.submit(
        "/admin/toolcatalog/upstream/add/",
        {
            "name": "box",
            "transport": "streamable_http",
            "url": peer.url,
            "enabled": "on",
            "values-0-kind": "header",
            "values-0-name": "Authorization",
            "values-0-value": f"Bearer {SECRET_TOKEN}",
        },
    )
    assert response.status_code == 302, response.content.decode()[-3000:]
    return Upstream.objects.get(name="box")


def test_a_secret_header_is_write_only_and_never_shown(
    http_peer: Peer, catalog: dict[str, Any], celery_worker: CeleryWorker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    http_peer.offer(SEARCH, HOLD)
    admin = AdminBrowser()
    upstream = register_in_admin(admin, http_peer)
    assert UpstreamValue.objects.get(upstream=upstream).value == f"Bearer {SECRET_TOKEN}"

    synced = admin.post(
        "/admin/toolcatalog/upstream/", {"action": "sync_selected", "_selected_action": upstream.pk}, follow=True
    )
    assert "Synced box: 2 added" in synced.content.decode()
    upstream.refresh_from_db()
    assert upstream.sync_status == SyncStatus.OK

    _, token = create_or_update_agent("box-agent", {"box_search_seats": 0})
    api = AgentApi(Client(), token)
    call = api.propose({"tool": "box_search_seats", "arguments": {"event_id": "EV-5"}}, wait=20).json()
    assert call["status"] == "succeeded", celery_worker.log()

    link = Tool.objects.get(name="box_search_seats").upstream_link
    pages = [
        synced,
        admin.get("/admin/toolcatalog/upstream/"),
        admin.get(f"/admin/toolcatalog/upstream/{upstream.pk}/change/"),
        admin.get(f"/admin/toolcatalog/upstreamtool/{link.pk}/change/"),
        admin.get(f"/admin/toolcatalog/tool/{link.tool_id}/change/"),
        admin.get("/admin/audit/event/"),
        admin.get("/audit/"),
        admin.get(f"/calls/{call['id']}/"),
        api.tools(),
        api.get(call["id"]),
    ]
    for page in pages:
        assert page.status_code in (200, 302), page
        assert SECRET_TOKEN not in page.content.decode()
    change_page = pages[2].content.decode()
    assert "Authorization" in change_page and "•••• (set)" in change_page  # named, and said to be set
    events = json.dumps([e.data for e in Event.objects.all()], ensure_ascii=False)
    assert "upstream" in events and SECRET_TOKEN not in events
    assert SECRET_TOKEN not in caplog.text
    assert SECRET_TOKEN not in celery_worker.log()
    wait_until(lambda: http_peer.calls("search_seats"))  # the header did reach the upstream itself


def test_saving_the_upstream_with_the_secret_left_blank_keeps_it(http_peer: Peer, catalog: dict[str, Any]) -> None:
    admin = AdminBrowser()
    upstream = register_in_admin(admin, http_peer)
    url = f"/admin/toolcatalog/upstream/{upstream.pk}/change/"

    response = admin.submit(url, {"prefix": "boxoffice"})

    assert response.status_code == 302
    assert UpstreamValue.objects.get(upstream=upstream).value == f"Bearer {SECRET_TOKEN}"
    assert Upstream.objects.get(pk=upstream.pk).prefix == "boxoffice"
