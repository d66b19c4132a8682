"""Celery tasks of the catalog: the periodic sync of upstream MCP servers (beat, config/celery.py)."""

from __future__ import annotations

from celery import shared_task

from toolcatalog.upstreams_sync import sync_all

SYNC_UPSTREAMS = "toolcatalog.tasks.sync_upstreams"


@shared_task(name=SYNC_UPSTREAMS, ignore_result=True)
def sync_upstreams() -> dict[str, str]:
    """Sync every enabled upstream; a failure is recorded on its upstream (and audited once), not raised."""
    return sync_all()
