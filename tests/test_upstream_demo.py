"""The demo's own upstream: seed_demo registers and syncs the box office MCP server; a big hold waits for a person."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from approvals.models import ToolCall
from tests.conftest import AgentApi
from tests.processes import CeleryWorker
from toolcatalog.models import Tool
from toolcatalog.upstreams import SyncStatus, Upstream

pytestmark = pytest.mark.worker


@pytest.fixture
def seeded(settings: Any, tmp_path: Path, transactional_db: None) -> dict[str, Any]:
    settings.VAR_DIR = tmp_path  # the box office's inventory file goes here
    out = StringIO()
    call_command("seed_demo", "--tokens-file", str(tmp_path / "tokens.json"), stdout=out)
    return {"output": out.getvalue(), "tokens": json.loads((tmp_path / "tokens.json").read_text())}


def test_seed_demo_registers_and_syncs_the_box_office_upstream(seeded: dict[str, Any]) -> None:
    upstream = Upstream.objects.get(name="boxoffice")
    assert upstream.transport == "stdio" and upstream.sync_status == SyncStatus.OK
    assert "Upstream boxoffice (stdio, boxoffice_mcp.py): 3 tools synced" in seeded["output"]
    tiers = dict(Tool.objects.filter(name__startswith="boxoffice_").values_list("name", "base_tier__level"))
    assert tiers == {"boxoffice_search_seats": 0, "boxoffice_hold_seats": 1, "boxoffice_release_hold": 1}
    assert Tool.objects.get(name="boxoffice_hold_seats").rules.get().tier.level == 2
    assert "box-office-upstream" in seeded["tokens"]


def test_a_second_seed_changes_nothing_of_the_upstream(seeded: dict[str, Any], tmp_path: Path) -> None:
    versions = dict(Tool.objects.values_list("name", "version"))
    out = StringIO()
    call_command("seed_demo", "--tokens-file", str(tmp_path / "tokens.json"), stdout=out)
    assert dict(Tool.objects.values_list("name", "version")) == versions
    assert "(new)" not in out.getvalue()


def test_the_demo_agent_holds_two_seats_at_once_and_four_wait_for_a_reviewer(
    seeded: dict[str, Any], celery_worker: CeleryWorker
) -> None:
    api = AgentApi(Client(), seeded["tokens"]["box-office-upstream"])
    two = {"event_id": "show-domingo", "seat_ids": ["A1", "A2"]}
    four = {"event_id": "show-domingo", "seat_ids": ["B1", "B2", "B3", "B4"]}

    small = api.propose({"tool": "boxoffice_hold_seats", "arguments": two, "idempotency_key": "two"}, wait=30).json()
    big = api.propose({"tool": "boxoffice_hold_seats", "arguments": four, "idempotency_key": "four"}).json()

    assert small["status"] == "succeeded", celery_worker.log()
    assert small["result"]["structuredContent"]["seat_ids"] == ["A1", "A2"]
    assert big["status"] == "pending_approval" and big["risk_tier"] == 2
    assert ToolCall.objects.get(pk=big["id"]).risk_reasons[0]["rule"] == "more than two seats"
