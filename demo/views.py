"""The demo services over HTTP: the protocol of Gatehouse's `http` executor.

    POST /demo-services/tools/<tool>           apply the effect (once per Idempotency-Key)
    POST /demo-services/tools/<tool>/preview   {summary, before, after}; changes nothing
    POST /demo-services/tools/<tool>/verify    {confirmed, observed, detail}

Every request must carry a scoped credential for exactly this operation and this
resource (403 otherwise), checked as any downstream would: by demo.verifier, with
Gatehouse's public keys fetched from its JWKS URL, and nothing of Gatehouse's own.
An execution's credential takes effect once (its jti is spent). These are JSON
endpoints for machines, hence csrf_exempt: the bearer credential, not a cookie, is
what authorises them.

Configuration, as a downstream has it: GATEHOUSE_DEMO_JWKS_URL (default: the JWKS of
the site the demo services are part of), GATEHOUSE_DEMO_AUDIENCE (default: the origin
of GATEHOUSE_DEMO_SERVICES_URL, the audience Gatehouse gives the demo tools) and the
issuer, GATEHOUSE_ISSUER.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Protocol
from urllib.parse import urlsplit

from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from audit.typealiases import JSONObject, JSONValue
from demo import faults, refunds, seats
from demo.common import ServiceError
from demo.models import SpentCredential
from demo.verifier import ROUTE_SCOPES, Claims, Refused, Verifier, bearer

Preview = Callable[[JSONObject], JSONObject]


class Execute(Protocol):
    def __call__(self, arguments: JSONObject, *, key: str, claims: Claims) -> JSONObject: ...


class Verify(Protocol):
    def __call__(self, arguments: JSONObject, result: JSONObject, *, key: str) -> JSONObject: ...


def _read_only_preview(arguments: JSONObject) -> JSONObject:
    return {"summary": "Read-only: this call changes nothing.", "before": None, "after": None}


def _read_only_verify(arguments: JSONObject, result: JSONObject, *, key: str) -> JSONObject:
    return {"confirmed": True, "observed": {}, "detail": "Read-only: there is no effect to confirm."}


@dataclass(frozen=True)
class Service:
    resource_argument: str
    execute: Execute
    preview: Preview = _read_only_preview
    verify: Verify = _read_only_verify
    writes: bool = False


SERVICES: dict[str, Service] = {
    "emitir_estorno": Service("pedido_id", refunds.refund, refunds.preview_refund, refunds.verify_refund, writes=True),
    "get_order_status": Service("order_id", refunds.order_status),
    "search_seats": Service("event_id", seats.search_seats),
    "hold_seats": Service("event_id", seats.hold_seats, seats.preview_hold, seats.verify_hold, writes=True),
    "release_hold": Service("hold_id", seats.release_hold, seats.preview_release, seats.verify_release, writes=True),
}


def verifier() -> Verifier:
    """Return the demo services' credential verifier, as configured now."""
    base = settings.GATEHOUSE_DEMO_SERVICES_URL.rstrip("/")
    parts = urlsplit(base)
    return _verifier(
        os.environ.get("GATEHOUSE_DEMO_JWKS_URL") or f"{base}/.well-known/jwks.json",
        os.environ.get("GATEHOUSE_DEMO_AUDIENCE") or f"{parts.scheme}://{parts.netloc}",
        settings.GATEHOUSE_ISSUER,
    )


@cache
def _verifier(jwks_url: str, audience: str, issuer: str) -> Verifier:
    # One per configuration and process: it keeps the JWK Set it fetched (the JWKS's Cache-Control lifespan).
    return Verifier(jwks_url, audience=audience, issuer=issuer)


def spend(claims: Claims) -> None:
    """Record that the credential took effect here; refuse one that already did (a replay)."""
    expires_at = datetime.fromtimestamp(claims.expires_at, tz=UTC)
    # An expired credential is refused anyway: its jti need not be kept, so the table stays small.
    SpentCredential.objects.filter(expires_at__lt=timezone.now() - timedelta(minutes=1)).delete()
    try:
        with transaction.atomic():
            SpentCredential.objects.create(jti=claims.jti, expires_at=expires_at)
    except IntegrityError:
        raise ServiceError(403, "forbidden", "This credential was already used.", reason="replayed") from None


def _json_object(request: HttpRequest) -> JSONObject:
    try:
        body = json.loads(request.body or b"null")
    except (ValueError, UnicodeDecodeError):
        body = None
    if not isinstance(body, dict):
        raise ServiceError(400, "malformed_request", "The body must be a JSON object.")
    return body


def _arguments(body: JSONObject, route: str) -> JSONObject:
    """Return the call's arguments: the body itself, or its `arguments` for a verify."""
    arguments: JSONValue = body.get("arguments") if route == "verify" else body
    if not isinstance(arguments, dict):
        raise ServiceError(400, "malformed_request", "arguments must be a JSON object.")
    return arguments


def _authorise(request: HttpRequest, tool: str, service: Service, arguments: JSONObject, route: str) -> Claims:
    """Return the claims of the request's credential, which must fit this tool, resource and route."""
    resource = arguments.get(service.resource_argument)
    token = bearer(request.headers.get("Authorization"))
    try:
        return verifier().verify(token, tool, None if resource is None else str(resource), ROUTE_SCOPES[route])
    except Refused as exc:
        if exc.reason == "keys_unavailable":  # not the credential's fault: Gatehouse may try again
            raise ServiceError(503, "unavailable", exc.message, reason=exc.reason) from None
        raise ServiceError(403, "forbidden", exc.message, reason=exc.reason) from None


def _serve(request: HttpRequest, tool: str, route: str) -> JsonResponse:
    """Authorise, then run one route of one service; every refusal is a JSON error."""
    try:
        service = SERVICES.get(tool)
        if service is None:
            raise ServiceError(404, "unknown_service", f"No demo service for {tool!r}.")
        body = _json_object(request)
        arguments = _arguments(body, route)
        claims = _authorise(request, tool, service, arguments, route)
        key = request.headers.get("Idempotency-Key", "")
        if route == "preview":
            return JsonResponse(service.preview(arguments))
        if route == "verify":
            result = body.get("result")
            return JsonResponse(service.verify(arguments, result if isinstance(result, dict) else {}, key=key))
        if service.writes and not key:
            raise ServiceError(400, "idempotency_key_required", "Send an Idempotency-Key header.")
        spend(claims)
        if faults.unavailable(claims.resource, key):
            raise ServiceError(503, "unavailable", "The service is unavailable; try again.")
        return JsonResponse(service.execute(arguments, key=key, claims=claims))
    except ServiceError as exc:
        return JsonResponse(exc.body(), status=exc.status)


@csrf_exempt
@require_POST
def execute(request: HttpRequest, tool: str) -> JsonResponse:
    return _serve(request, tool, "execute")


@csrf_exempt
@require_POST
def preview(request: HttpRequest, tool: str) -> JsonResponse:
    return _serve(request, tool, "preview")


@csrf_exempt
@require_POST
def verify_effect(request: HttpRequest, tool: str) -> JsonResponse:
    return _serve(request, tool, "verify")
