"""The `gatehouse_protocol` executor kind: a tool is an HTTP endpoint that speaks Gatehouse's three-route protocol.

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

import json
import os
import urllib.request
from functools import cache
from urllib.parse import urlsplit

import certifi
import urllib3
from django.conf import settings
from opentelemetry.propagate import inject
from urllib3.exceptions import HTTPError, NewConnectionError, TimeoutError

from audit.typealiases import JSONObject, JSONValue
from toolcatalog.executors.base import (
    ExecutionContext,
    Executor,
    ExecutorError,
    PermanentError,
    RetryableError,
    Verification,
)

# Below Celery's soft time limit, so a hung downstream is a retryable timeout, not a killed task.
TIMEOUT = urllib3.Timeout(connect=3.0, read=20.0)
RETRYABLE_STATUSES = frozenset({408, 425, 429})
# Kept-alive connections per downstream host: the web server's threads ask for previews concurrently.
CONNECTIONS_PER_HOST = 8


def pool_for(url: str) -> urllib3.PoolManager:
    """Return this process's connection pool for `url`: direct, or through the proxy the environment names.

    Connections are kept: a fresh one per execution, preview and verification would
    add a TCP handshake to each, on every auto-approved call's path. urllib3 rather
    than a fuller client: it does less per request, and it keeps no cookies, so
    nothing one downstream answered rides along with another call's request; only
    the call's own credential does. No retries and no redirects: the worker decides
    what is retried, with the same idempotency key.
    """
    parts = urlsplit(url)
    proxies = _environment_proxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all") or ""
    if proxy and urllib.request.proxy_bypass(parts.hostname or ""):  # NO_PROXY
        proxy = ""
    return _pool(proxy)


@cache
def _environment_proxies() -> dict[str, str]:
    """HTTP(S)_PROXY, ALL_PROXY and NO_PROXY, read once per process, as an HTTP client reads them when built."""
    return urllib.request.getproxies()


# Built on first use in each process (after any fork). Two threads asking first at once
# may each build one; the cache keeps one and the other is dropped before any connection.
@cache
def _pool(proxy: str) -> urllib3.PoolManager:
    ca_certs, ca_cert_dir = _trusted_certificates()
    if proxy:
        return urllib3.ProxyManager(
            proxy,
            timeout=TIMEOUT,
            retries=False,
            maxsize=CONNECTIONS_PER_HOST,
            ca_certs=ca_certs,
            ca_cert_dir=ca_cert_dir,
        )
    return urllib3.PoolManager(
        timeout=TIMEOUT, retries=False, maxsize=CONNECTIONS_PER_HOST, ca_certs=ca_certs, ca_cert_dir=ca_cert_dir
    )


def _trusted_certificates() -> tuple[str | None, str | None]:
    """Return whom TLS trusts (ca_certs, ca_cert_dir), as HTTP clients commonly decide.

    SSL_CERT_FILE, else SSL_CERT_DIR, else certifi's bundle.
    """
    if cert_file := os.environ.get("SSL_CERT_FILE"):
        return cert_file, None
    if cert_dir := os.environ.get("SSL_CERT_DIR"):
        return None, cert_dir
    return certifi.where(), None


class GatehouseProtocolExecutor(Executor):
    """Executes, previews and verifies a call by POSTing JSON to the tool's endpoint."""

    idempotent_delivery = True

    def url(self, suffix: str = "") -> str:
        """Return the absolute URL of the tool's endpoint (read per call: the base URL is a setting)."""
        if self.ref.startswith(("http://", "https://")):
            base = self.ref
        else:
            base = settings.GATEHOUSE_DEMO_SERVICES_URL.rstrip("/") + "/" + self.ref.lstrip("/")
        return base.rstrip("/") + suffix

    def execute(self, ctx: ExecutionContext) -> JSONObject:
        """POST the arguments; return the downstream's result."""
        return self._post(ctx, "", ctx.arguments)

    def dry_run(self, ctx: ExecutionContext) -> JSONObject:
        """POST the arguments to `/preview`; return `{summary, before, after}`."""
        preview = self._post(ctx, "/preview", ctx.arguments)
        return {
            "summary": str(preview.get("summary", "")),
            "before": preview.get("before"),
            "after": preview.get("after"),
            **{k: v for k, v in preview.items() if k not in {"summary", "before", "after"}},
        }

    def verify(self, ctx: ExecutionContext, result: JSONObject) -> Verification:
        """Ask `/verify` whether the effect `result` describes is really there."""
        answer = self._post(ctx, "/verify", {"arguments": ctx.arguments, "result": result})
        observed = answer.get("observed")
        return Verification(
            confirmed=answer.get("confirmed") is True,
            observed=observed if isinstance(observed, dict) else {"observed": observed},
            detail=str(answer.get("detail", "")),
        )

    def _post(self, ctx: ExecutionContext, suffix: str, body: JSONObject) -> JSONObject:
        """POST `body` with the attempt's credential and key; return the JSON object answered."""
        headers = {
            "Authorization": f"Bearer {ctx.credential}",
            "Accept": "application/json",
            "Content-Type": "application/json",
        }
        if ctx.idempotency_key:
            headers["Idempotency-Key"] = ctx.idempotency_key
        inject(headers)  # the current trace's traceparent, when tracing is on (approvals.telemetry)
        url = self.url(suffix)
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        try:
            response = pool_for(url).request("POST", url, body=data, headers=headers)
        except (HTTPError, ValueError) as exc:
            raise _unanswered(url, exc) from exc
        return _answer(url, response)


def _unanswered(url: str, exc: HTTPError | ValueError) -> ExecutorError:
    """Classify a request that got no answer: one that cannot be sent is permanent; the rest may work later."""
    if isinstance(exc, ValueError):  # a malformed URL (urllib3's LocationValueError is one too) or header
        return PermanentError(f"{url} cannot be requested: {exc}", detail={"url": url})
    # urllib3 files a refused connection (NewConnectionError) under its timeouts.
    if isinstance(exc, TimeoutError) and not isinstance(exc, NewConnectionError):
        return RetryableError(f"{url} timed out", detail={"url": url})
    return RetryableError(f"{url} unreachable: {exc}", detail={"url": url})  # refused, reset, broken answer


def _answer(url: str, response: urllib3.BaseHTTPResponse) -> JSONObject:
    """Return the JSON object of a 2xx response; raise the classified error of anything else."""
    try:
        payload: JSONValue = response.json()
    except ValueError:  # not JSON, or not UTF-8
        payload = None
    status = response.status
    if status >= 500 or status in RETRYABLE_STATUSES:
        raise RetryableError(f"{url} answered {status}", detail={"status": status, "body": payload})
    if status >= 400:
        message = payload.get("message") if isinstance(payload, dict) else None
        raise PermanentError(message or f"{url} answered {status}", detail={"status": status, "body": payload})
    if not isinstance(payload, dict):
        raise PermanentError(f"{url} answered {status} without a JSON object", detail={"status": status})
    return payload
