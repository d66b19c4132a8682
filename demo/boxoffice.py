"""The demo's upstream MCP server, seen from Gatehouse: registered, synced, and given a rule by seed_demo.

`demo/boxoffice_mcp.py` is the server (it imports nothing of Gatehouse). Here it is
registered as the stdio upstream `boxoffice` — the worker starts it for each call,
with its inventory file under the demo's var folder — and synced, so the catalog has
`boxoffice_search_seats` (tier 0), `boxoffice_hold_seats` (tier 1) and
`boxoffice_release_hold` (tier 1). The demo's rule then holds a hold of more than two
seats for a reviewer (tier 2), as an admin would add it; later syncs keep it.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from django.conf import settings

from toolcatalog.models import RiskRule, RiskTier, Tool
from toolcatalog.upstreams import Transport, Upstream
from toolcatalog.upstreams_client import UpstreamError
from toolcatalog.upstreams_sync import add_upstream, sync

NAME = "boxoffice"
SERVER = Path(__file__).resolve().parent / "boxoffice_mcp.py"
HOLD_RULE = {
    "name": "more than two seats",
    "description": "A hold of three or more seats blocks a block of the arena: a person checks it.",
    "condition": {"properties": {"seat_ids": {"minItems": 3}}, "required": ["seat_ids"]},
}
# The demo agent that uses the upstream's tools, and how far each grant reaches.
GRANTS = {"boxoffice_search_seats": 0, "boxoffice_hold_seats": 2, "boxoffice_release_hold": 1}


def command() -> str:
    """Return the command that starts the server: this interpreter, this checkout's file, the demo's inventory.

    The inventory's path is an argument, not an environment variable: an upstream's environment values are
    secrets (encrypted under the secrets key), and this one is not.
    """
    inventory = Path(settings.VAR_DIR).resolve() / "boxoffice.sqlite3"
    return shlex.join([sys.executable, str(SERVER), "--inventory", str(inventory)])


def register() -> Upstream:
    """Create the upstream, or bring its command up to date (this checkout, or its var folder, may have moved)."""
    upstream = Upstream.objects.filter(name=NAME).first()
    if upstream is None:
        return add_upstream(NAME, command=command())
    if upstream.transport != Transport.STDIO or upstream.command != command():
        upstream.transport, upstream.url, upstream.command = Transport.STDIO, "", command()
        upstream.save()
    return upstream


def seed(tiers: dict[int, RiskTier]) -> str:
    """Register and sync the box office upstream, add the demo's hold rule; return one line saying how it went."""
    upstream = register()
    try:
        report = sync(upstream)
    except UpstreamError as error:
        return f"Upstream {NAME} (stdio, {SERVER.name}): not synced — {error}"
    hold = Tool.objects.filter(name="boxoffice_hold_seats").first()
    if hold is not None and not RiskRule.objects.filter(tool=hold, name=HOLD_RULE["name"]).exists():
        RiskRule.objects.create(tool=hold, tier=tiers[2], **HOLD_RULE)
    tools = upstream.tools.filter(gone=False).count()
    news = f", {report.changes} change(s)" if report.changes else ""
    return f"Upstream {NAME} (stdio, {SERVER.name}): {tools} tools synced{news}."
