"""The Celery application: Redis broker in production, the embedded broker (config.embedded_broker) by default.

Delivery is at-least-once (late acks, re-queue when a worker dies); the execution task
makes that safe by claiming its row with a compare-and-set before any effect.
"""

from __future__ import annotations

import os
from pathlib import Path

from celery import Celery
from django.conf import LazySettings

from config import embedded_broker

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("gatehouse")


@app.on_configure.connect
def configure(sender: object, **kwargs: object) -> None:
    """Apply Gatehouse's delivery guarantees from Django settings (on first use)."""
    from django.conf import settings

    broker_transport, transport_options = _broker(settings)
    app.conf.update(  # the sender is `app`: only it sends its on_configure
        broker_url=settings.CELERY_BROKER_URL,
        broker_transport=broker_transport,
        broker_transport_options=transport_options,
        broker_connection_retry_on_startup=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_time_limit=settings.CELERY_TASK_HARD_TIME_LIMIT,
        task_soft_time_limit=settings.CELERY_TASK_SOFT_TIME_LIMIT,
        task_ignore_result=True,
        # No result backend: the one Celery builds (disabled) is safe to share, and a
        # request thread under ASGI is new per request, so a per-thread one would be
        # built anew for every message sent.
        result_backend_thread_safe=True,
        task_serializer="json",
        accept_content=["json"],
        timezone="UTC",
        worker_hijack_root_logger=False,
        beat_schedule=_beat_schedule(settings),
    )


def _broker(settings: LazySettings) -> tuple[str | None, dict[str, object]]:
    """Return the broker's transport (None: the URL's own) and its options."""
    transport_options: dict[str, object] = {
        # Above the hard time limit, so Redis never re-delivers a task still running.
        "visibility_timeout": settings.CELERY_TASK_HARD_TIME_LIMIT * 3,
    }
    if settings.CELERY_BROKER_URL.startswith("sentinel://"):
        # kombu asks these sentinels for the master of this name, and again after a failover.
        transport_options["master_name"] = settings.GATEHOUSE_REDIS_SENTINEL_MASTER
    if not embedded_broker.is_embedded(settings.CELERY_BROKER_URL):
        return None, transport_options
    # A dotted transport path is only honoured as a setting, never from the URL.
    transport_options.update(embedded_broker.transport_options(Path(settings.CELERY_EMBEDDED_BROKER_DIR).resolve()))
    return embedded_broker.TRANSPORT, transport_options


def _beat_schedule(settings: LazySettings) -> dict[str, dict[str, object]]:
    """Return the periodic tasks beat sends."""
    return {
        "sweep": {
            "task": "approvals.tasks.sweep",
            "schedule": float(settings.CELERY_SWEEP_INTERVAL_SECONDS),
        },
        # Reminders and escalations that fell due; deliveries to retry or take back from a dead worker.
        "notifications-sweep": {
            "task": "notifications.tasks.sweep",
            "schedule": float(settings.CELERY_SWEEP_INTERVAL_SECONDS),
        },
        # Upstream MCP servers' tools/list into the catalog (new, changed and removed tools).
        "upstreams-sync": {
            "task": "toolcatalog.tasks.sync_upstreams",
            "schedule": float(settings.GATEHOUSE_UPSTREAM_SYNC_SECONDS),
        },
    }


app.autodiscover_tasks()
