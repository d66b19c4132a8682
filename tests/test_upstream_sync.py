"""Sync: an upstream MCP server's tools/list becomes catalog tools (real upstream processes, both transports)."""

from __future__ import annotations

import json
import shlex
import socket
import sys
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from audit.models import Event
from tests.processes import free_port, http_server
from tests.upstream_peers import CANCEL, HOLD, SEARCH, SECRET_TOKEN, Peer
from toolcatalog.models import RiskTier, Tool
from toolcatalog.upstreams import SyncStatus, Upstream
from toolcatalog.upstreams_client import UpstreamError
from toolcatalog.upstreams_sync import catalog_name, sync

pytestmark = pytest.mark.django_db


class WebPage(BaseHTTPRequestHandler):
    """A web server that is not an MCP server: every request gets an HTML page."""

    def do_POST(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(b"<html><body>Welcome</body></html>")

    do_GET = do_POST

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def tiers(catalog: dict[str, Any]) -> dict[int, RiskTier]:
    return {tier.level: tier for tier in RiskTier.objects.all()}


def test_sync_creates_the_tools_with_schema_annotations_and_tiers(peer: Peer, tiers: dict[int, RiskTier]) -> None:
    peer.offer(SEARCH, HOLD, CANCEL)
    report = sync(peer.register("box"))

    assert sorted(report.added) == ["box_cancel_order", "box_hold_seats", "box_search_seats"]
    search, hold, cancel = (Tool.objects.get(name=f"box_{n}") for n in ("search_seats", "hold_seats", "cancel_order"))
    assert search.input_schema == SEARCH["inputSchema"]
    assert search.description == SEARCH["description"]
    assert (search.read_only_hint, search.base_tier.level) == (True, 0)
    assert (hold.read_only_hint, hold.destructive_hint, hold.base_tier.level) == (False, False, 1)
    assert (cancel.destructive_hint, cancel.base_tier.level) == (True, 2)
    assert (cancel.executor_kind, cancel.executor_ref) == ("mcp", "box/cancel_order")
    upstream = Upstream.objects.get(name="box")
    assert upstream.sync_status == SyncStatus.OK and upstream.synced_at is not None
    added = Event.objects.filter(action="upstream.tool_added").values_list("tool_name", flat=True)
    assert sorted(added) == sorted(report.added)


def test_a_second_sync_with_nothing_new_changes_nothing(peer: Peer, tiers: dict[int, RiskTier]) -> None:
    peer.offer(SEARCH, HOLD)
    upstream = peer.register("box")
    sync(upstream)
    events = Event.objects.count()

    report = sync(upstream)

    assert report.changes == 0 and not report.skipped
    assert Event.objects.count() == events
    assert Tool.objects.get(name="box_hold_seats").version == 1


def test_admin_choices_survive_and_a_changed_schema_bumps_the_version(
    http_peer: Peer, tiers: dict[int, RiskTier]
) -> None:
    http_peer.offer(SEARCH, HOLD)
    upstream = http_peer.register("box")
    sync(upstream)
    hold = Tool.objects.get(name="box_hold_seats")
    hold.base_tier = tiers[3]  # the admin raises it
    hold.save()
    search = Tool.objects.get(name="box_search_seats")
    search.enabled = False  # the admin turns it off
    search.save()
    version = Tool.objects.get(pk=hold.pk).version

    changed = {
        **HOLD,
        "inputSchema": {
            **HOLD["inputSchema"],
            "properties": {**HOLD["inputSchema"]["properties"], "note": {"type": "string"}},
        },
    }
    http_peer.offer(SEARCH, changed)
    report = sync(upstream)

    hold.refresh_from_db()
    search.refresh_from_db()
    assert report.changed == ["box_hold_seats"]
    assert hold.version == version + 1
    assert "note" in hold.input_schema["properties"]
    assert hold.base_tier.level == 3  # the admin's tier, not the annotations'
    assert search.enabled is False
    event = Event.objects.get(action="upstream.tool_changed")
    assert event.data["changed"] == ["inputSchema"] and event.tool_name == "box_hold_seats"


def test_a_tool_gone_upstream_is_disabled_never_deleted_and_comes_back(
    http_peer: Peer, tiers: dict[int, RiskTier]
) -> None:
    http_peer.offer(SEARCH, HOLD)
    upstream = http_peer.register("box")
    sync(upstream)

    http_peer.offer(SEARCH)
    report = sync(upstream)
    hold = Tool.objects.get(name="box_hold_seats")
    assert report.disabled == ["box_hold_seats"] and hold.enabled is False
    assert Event.objects.filter(action="upstream.tool_disabled", tool_name="box_hold_seats").exists()

    http_peer.offer(SEARCH, HOLD)
    report = sync(upstream)
    hold.refresh_from_db()
    assert report.enabled == ["box_hold_seats"] and hold.enabled is True


def test_invalid_schemas_and_collisions_are_skipped_with_the_reason(
    http_peer: Peer, tiers: dict[int, RiskTier]
) -> None:
    invalid = {**CANCEL, "name": "broken", "inputSchema": {"type": "object", "properties": {"x": {"type": "nonsense"}}}}
    twin = {**SEARCH, "name": "search.seats"}  # becomes box_search_seats too
    Tool.objects.create(
        name="box_taken",
        description="a native tool",
        input_schema={"type": "object"},
        base_tier=tiers[0],
        executor_ref="x",
    )
    taken = {**SEARCH, "name": "taken"}
    http_peer.offer(SEARCH, twin, invalid, taken)

    report = sync(http_peer.register("box"))

    reasons = {s["tool"]: s["reason"] for s in report.skipped}
    assert report.added == ["box_search_seats"]
    assert "not valid JSON Schema" in reasons["broken"]
    assert (
        "collides with upstream tool 'search.seats'" in reasons["search_seats"]
        or "collides" in reasons["search.seats"]
        or "collides" in reasons["search_seats"]
    )
    assert "taken by another tool" in reasons["taken"]
    upstream = Upstream.objects.get(name="box")
    assert upstream.sync_status == SyncStatus.PARTIAL and "broken" in upstream.sync_message


def test_catalog_names_are_sanitised_and_at_most_64_characters() -> None:
    assert catalog_name("git", "read file/v2") == "git_read_file_v2"
    assert len(catalog_name("p", "x" * 200)) == 64


@pytest.mark.parametrize(
    "case",
    ["unreachable", "wrong auth", "not mcp"],
)
def test_bad_upstreams_fail_with_one_clear_line_and_nothing_half_synced(
    case: str, http_peer: Peer, tiers: dict[int, RiskTier], capsys: pytest.CaptureFixture[str]
) -> None:

    http_peer.offer(SEARCH)
    tools_before = Tool.objects.count()
    with http_server(WebPage) as web:
        url = {
            "unreachable": f"http://127.0.0.1:{free_port()}/mcp",
            "wrong auth": http_peer.url,
            "not mcp": f"{web}/mcp",
        }[case]
        with pytest.raises(CommandError) as raised:
            call_command("upstream", "add", "bad", "--url", url, "--header", "Authorization: Bearer wrong", "--sync")

    message = str(raised.value)
    expected = {"unreachable": "(unreachable)", "wrong auth": "(unauthorized)", "not mcp": "(not_mcp)"}[case]
    assert expected in message and "\n" not in message
    assert "wrong" not in message.replace("wrong auth", "")
    assert Tool.objects.count() == tools_before
    assert Upstream.objects.get(name="bad").sync_status == SyncStatus.FAILED


def test_a_stdio_command_that_does_not_exist_fails_plainly(tiers: dict[int, RiskTier]) -> None:
    with pytest.raises(CommandError, match=r"\(unreachable\)"):
        call_command("upstream", "add", "ghost", "--command", "/nonexistent/mcp-server --flag", "--sync")


def test_the_command_adds_syncs_and_lists(
    http_peer: Peer, tiers: dict[int, RiskTier], capsys: pytest.CaptureFixture[str]
) -> None:
    http_peer.offer(SEARCH, CANCEL)
    call_command(
        "upstream", "add", "box", "--url", http_peer.url, "--header", f"Authorization: Bearer {SECRET_TOKEN}", "--sync"
    )
    out = capsys.readouterr().out
    assert "+ box_search_seats" in out and "+ box_cancel_order" in out

    http_peer.offer(SEARCH)
    call_command("upstream", "sync", "box", "--json")
    report = json.loads(capsys.readouterr().out)
    assert report["disabled"] == ["box_cancel_order"]

    call_command("upstream", "list", "--json")
    listed = json.loads(capsys.readouterr().out)
    assert listed[0]["headers"] == ["Authorization"] and listed[0]["tools"] == ["box_search_seats"]
    assert SECRET_TOKEN not in json.dumps(listed)
    assert not any(SECRET_TOKEN in json.dumps(e.data) for e in Event.objects.all())


def test_a_sync_that_fails_midway_leaves_the_catalog_as_it_was(http_peer: Peer, db: None) -> None:
    RiskTier.objects.create(level=0, name="read")  # tier 1, which the hold needs, is missing
    http_peer.offer(SEARCH, HOLD)
    upstream = http_peer.register("box")

    with pytest.raises(UpstreamError) as raised:
        sync(upstream)

    assert raised.value.code == "no_tiers"
    assert not Tool.objects.exists()  # search_seats was written first, and rolled back with the rest
    assert not Event.objects.filter(action__startswith="upstream.tool_").exists()


def test_a_stdio_command_that_is_not_an_mcp_server_fails_plainly(tiers: dict[int, RiskTier], settings: Any) -> None:
    settings.GATEHOUSE_UPSTREAM_TIMEOUT_SECONDS = 2  # it answers nothing the SDK can read: a timeout, sooner
    script = "import sys; print('hello, I am not MCP'); sys.stdin.read()"
    with pytest.raises(CommandError) as raised:
        call_command("upstream", "add", "chatty", "--command", f"{sys.executable} -c {shlex.quote(script)}", "--sync")
    assert "sync of chatty failed (timeout)" in str(raised.value) and "\n" not in str(raised.value)
    assert not Tool.objects.filter(name__startswith="chatty_").exists()


def test_a_server_that_never_answers_times_out(tiers: dict[int, RiskTier], settings: Any) -> None:
    settings.GATEHOUSE_UPSTREAM_TIMEOUT_SECONDS = 1
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/mcp"
        with pytest.raises(CommandError, match=r"\(timeout\)"):
            call_command("upstream", "add", "silent", "--url", url, "--sync")


def test_the_periodic_task_syncs_every_enabled_upstream_and_beat_runs_it(
    http_peer: Peer, tiers: dict[int, RiskTier]
) -> None:
    from config.celery import app
    from toolcatalog.tasks import SYNC_UPSTREAMS, sync_upstreams

    http_peer.offer(SEARCH)
    http_peer.register("box")
    off = http_peer.register("off", prefix="off")
    Upstream.objects.filter(pk=off.pk).update(enabled=False)

    outcomes = sync_upstreams()

    assert outcomes == {"box": "1 change(s), 0 skipped"}
    assert (
        Tool.objects.filter(name="box_search_seats").exists()
        and not Tool.objects.filter(name="off_search_seats").exists()
    )
    app.loader.import_default_modules()
    assert SYNC_UPSTREAMS in {entry["task"] for entry in app.conf.beat_schedule.values()}
