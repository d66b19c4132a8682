"""The `http` executor kind: a tool is an HTTP endpoint that speaks a three-route protocol.

For a tool whose executor reference is `<ref>` (a URL, or a path resolved against
settings.GATEHOUSE_DEMO_SERVICES_URL):

- `POST <ref>`          body: the arguments  → 2xx `{…result}`: apply the effect once;
- `POST <ref>/preview`  body: the arguments  → 2xx `{summary, before, after}`: change nothing;
- `POST <ref>/verify`   body: `{arguments, result}` → 2xx `{confirmed, observed, detail}`.

Every request carries `Authorization: Bearer <scoped credential>` and
`Idempotency-Key: <derived from the call id>`, so a repeat after a crash or a
timeout is applied at most once downstream. Errors are classified for the worker:
timeouts, connection failures, 5xx, 408 and 429 may succeed later (RetryableError);
any other 4xx will not (PermanentError).
"""

from __future__ import annotations

import threading
from typing import Any

import httpx
from django.conf import settings

from toolcatalog.executors.base import (
    ExecutionContext,
    Executor,
    PermanentError,
    RetryableError,
    Verification,
)
from toolcatalog.executors.registry import register

# Below Celery's soft time limit, so a hung downstream is a retryable timeout, not a killed task.
TIMEOUT = httpx.Timeout(20.0, connect=3.0)
RETRYABLE_STATUSES = frozenset({408, 425, 429})

_client: httpx.Client | None = None
_client_lock = threading.Lock()


def shared_client() -> httpx.Client:
    """Return this process's HTTP client, built on first use (after any fork).

    Building one costs ~30 ms (its TLS context) and a fresh connection per call
    adds a TCP handshake: one per execution, preview and verification was most of
    an auto-approved call's latency (docs/benchmarks.md). httpx clients are thread-safe.
    """
    global _client
    if _client is None:
        with _client_lock:
            if _client is None:
                _client = httpx.Client(timeout=TIMEOUT)
    return _client


class HttpExecutor(Executor):
    """Executes, previews and verifies a call by POSTing JSON to the tool's endpoint."""

    idempotent_delivery = True

    def url(self, suffix: str = "") -> str:
        """Return the absolute URL of the tool's endpoint (read per call: the base URL is a setting)."""
        if self.ref.startswith(("http://", "https://")):
            base = self.ref
        else:
            base = settings.GATEHOUSE_DEMO_SERVICES_URL.rstrip("/") + "/" + self.ref.lstrip("/")
        return base.rstrip("/") + suffix

    def execute(self, ctx: ExecutionContext) -> dict[str, Any]:
        """POST the arguments; return the downstream's result."""
        return self._post(ctx, "", ctx.arguments)

    def dry_run(self, ctx: ExecutionContext) -> dict[str, Any]:
        """POST the arguments to `/preview`; return `{summary, before, after}`."""
        preview = self._post(ctx, "/preview", ctx.arguments)
        return {
            "summary": str(preview.get("summary", "")),
            "before": preview.get("before"),
            "after": preview.get("after"),
            **{k: v for k, v in preview.items() if k not in {"summary", "before", "after"}},
        }

    def verify(self, ctx: ExecutionContext, result: dict[str, Any]) -> Verification:
        """Ask `/verify` whether the effect `result` describes is really there."""
        answer = self._post(ctx, "/verify", {"arguments": ctx.arguments, "result": result})
        observed = answer.get("observed")
        return Verification(
            confirmed=answer.get("confirmed") is True,
            observed=observed if isinstance(observed, dict) else {"observed": observed},
            detail=str(answer.get("detail", "")),
        )

    def _post(self, ctx: ExecutionContext, suffix: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST `body` with the attempt's credential and key; return the JSON object answered."""
        headers = {"Authorization": f"Bearer {ctx.credential}", "Accept": "application/json"}
        if ctx.idempotency_key:
            headers["Idempotency-Key"] = ctx.idempotency_key
        url = self.url(suffix)
        try:
            response = shared_client().post(url, json=body, headers=headers)
        except httpx.TimeoutException as exc:
            raise RetryableError(f"{url} timed out", detail={"url": url}) from exc
        except httpx.TransportError as exc:
            raise RetryableError(f"{url} unreachable: {exc}", detail={"url": url}) from exc
        return _answer(url, response)


def _answer(url: str, response: httpx.Response) -> dict[str, Any]:
    """Return the JSON object of a 2xx response; raise the classified error of anything else."""
    try:
        payload: Any = response.json()
    except ValueError:
        payload = None
    status = response.status_code
    if status >= 500 or status in RETRYABLE_STATUSES:
        raise RetryableError(f"{url} answered {status}", detail={"status": status, "body": payload})
    if status >= 400:
        message = payload.get("message") if isinstance(payload, dict) else None
        raise PermanentError(message or f"{url} answered {status}", detail={"status": status, "body": payload})
    if not isinstance(payload, dict):
        raise PermanentError(f"{url} answered {status} without a JSON object", detail={"status": status})
    return payload


@register("http")
def _http(ref: str) -> Executor:
    return HttpExecutor(ref)
