"""Health endpoints for a load balancer's or an orchestrator's probes.

`/healthz/live` says the process answers requests, and nothing more: a dependency that is down
must not make an orchestrator restart every replica, which would not bring it back.
`/healthz/ready` (and `/healthz`, its older name) says whether this process can do its work:
it reaches the database and the Celery broker. Gatehouse's own Redis uses (rate limits,
waiters; `GATEHOUSE_REDIS_URL`) fail open, so they are not part of readiness.
"""

from __future__ import annotations

from celery import current_app
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET


def _database_ok() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True
    except Exception:  # noqa: BLE001 — any failure means "unreachable" here
        return False


def _broker_ok() -> bool:
    try:
        # The app's own connection: the same URL, transport and options its tasks are sent with.
        with current_app.connection_for_write(connect_timeout=1, transport_options={"max_retries": 0}) as conn:
            conn.ensure_connection(max_retries=1, timeout=1)
        return True
    except Exception:  # noqa: BLE001
        return False


@never_cache
@require_GET
def live(request: HttpRequest) -> JsonResponse:
    """Return 200 whenever this process answers: no dependency is consulted."""
    return JsonResponse({"status": "ok"})


@never_cache
@require_GET
def ready(request: HttpRequest) -> JsonResponse:
    """Return 200 when the database and the broker are reachable, 503 naming the one that is not."""
    checks = {"database": _database_ok(), "broker": _broker_ok()}
    ok = all(checks.values())
    body = {"status": "ok" if ok else "degraded", **{k: "ok" if v else "unreachable" for k, v in checks.items()}}
    return JsonResponse(body, status=200 if ok else 503)
