"""Request guards: oversized API bodies, API errors in the API's shape, a database that went away mid-request."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from approvals.errors import ApiError, error_body, error_response

log = logging.getLogger(__name__)
API_PREFIXES = ("/api/", "/mcp")
# What an error answered outside the API's own handlers (the URL resolver, django-ninja's
# method check, Django's exception handling) means to an agent.
GENERIC_ERRORS: dict[int, tuple[str, str]] = {
    400: ("malformed_request", "The request could not be read."),
    403: ("permission_denied", "This request is not allowed."),
    404: ("not_found", "There is no API endpoint here; /api/v1/openapi.json lists them."),
    405: ("method_not_allowed", "{method} is not allowed here; use {allow}."),
    413: ("payload_too_large", "Request bodies are limited to {limit} bytes."),
    500: ("internal_error", "Gatehouse failed to answer this request; it has been logged."),
}


class ApiBodyLimit:
    """ASGI wrapper: refuse an API request whose body crosses the limit as it arrives.

    Django's ASGI handler reads a whole body (into a temporary file) before any
    middleware runs, and a chunked request declares no length. So the limit is kept
    here, at the byte where it is crossed: at most the limit is held, the rest is
    never read, and the client gets the API's 413 instead of Django's 400 and traceback.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(API_PREFIXES):
            await self.app(scope, receive, send)
            return
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if declared_length(scope) > limit:
            await send_payload_too_large(scope, send, limit)
            return
        received: list[Message] = []
        size = 0
        while not received or _more_to_come(received[-1]):
            message = await receive()
            size += len(message.get("body", b""))
            if size > limit:
                await send_payload_too_large(scope, send, limit)
                return
            received.append(message)
        await self.app(scope, _replay(received, receive), send)


def _more_to_come(message: Message) -> bool:
    """Return whether `message` says more of the body follows."""
    return message["type"] == "http.request" and bool(message.get("more_body", False))


def declared_length(scope: Scope) -> int:
    """Return the request's Content-Length (0 when absent or not a number)."""
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            return int(value) if value.isdigit() else 0
    return 0


async def send_payload_too_large(scope: Scope, send: Send, limit: int) -> None:
    """Answer 413 `payload_too_large` and close: the unread rest of the body is never wanted."""
    log.info("Payload Too Large: %s %s", scope["method"], scope["path"])  # expected: one line, as Django logs a 4xx
    message = GENERIC_ERRORS[413][1].format(limit=limit)
    payload = json.dumps(error_body("payload_too_large", message, limit_bytes=limit)).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def _replay(received: list[Message], receive: Receive) -> Receive:
    """Return a `receive` that gives the messages already read, then the connection's own (its disconnect)."""
    pending = list(received)

    async def replay() -> Message:
        return pending.pop(0) if pending else await receive()

    return replay


class ApiBodyLimitMiddleware:
    """Answer 413 `payload_too_large` to API requests whose declared body exceeds the limit.

    For WSGI servers and the test client; under ASGI, `ApiBodyLimit` has refused them already.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith(API_PREFIXES) and self._too_large(request):
            limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
            message = GENERIC_ERRORS[413][1].format(limit=limit)
            return error_response(ApiError("payload_too_large", message, limit_bytes=limit))
        return self.get_response(request)

    @staticmethod
    def _too_large(request: HttpRequest) -> bool:
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return False
        return length > settings.DATA_UPLOAD_MAX_MEMORY_SIZE


class ApiJsonErrorsMiddleware:
    """Give an error under /api/ the API's JSON body, whoever answered it.

    The API's handlers already do; this covers what they never see: an unknown path
    (Django's 404, its HTML debug page included), a method an endpoint does not take
    (django-ninja's plain 405), a request the middleware refuses (a Host header not
    allowed: Django's 400) and an unhandled exception (Django's 500).
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        answered_by_the_api = response.get("Content-Type", "").startswith("application/json")
        if request.path.startswith(API_PREFIXES) and response.status_code in GENERIC_ERRORS and not answered_by_the_api:
            return as_api_error(request, response)
        return response


def as_api_error(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """Return `response` with the API's error body in place of its HTML or text (status and headers kept)."""
    code, message = GENERIC_ERRORS[response.status_code]
    allow = response.get("Allow", "") or "none"
    text = message.format(limit=settings.DATA_UPLOAD_MAX_MEMORY_SIZE, method=request.method, allow=allow)
    response.content = json.dumps(error_body(code, text), ensure_ascii=False).encode()
    response["Content-Type"] = "application/json"
    response["Content-Length"] = str(len(response.content))
    return response


def database_unavailable(request: HttpRequest) -> HttpResponse:
    """Return the 503 for a request whose database connection failed: try again shortly."""
    if request.path.startswith(API_PREFIXES):
        error = ApiError("service_unavailable", "The database is unreachable for a moment; retry shortly.")
        error.headers["Retry-After"] = "1"
        return error_response(error)
    response = HttpResponse(
        "<!doctype html><title>Gatehouse is briefly unavailable</title>"
        "<h1>Briefly unavailable</h1><p>The database could not be reached. Reload in a moment.</p>",
        status=503,
    )
    response["Retry-After"] = "1"
    return response


class DatabaseUnavailableMiddleware:
    """Turn a lost database connection into a clean 503.

    The failed transaction was rolled back by the database, so nothing is half-written;
    the client is told to retry, which idempotency keys make safe.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, OperationalError | InterfaceError):
            log.warning("database unavailable during %s %s: %s", request.method, request.path, exception)
            return database_unavailable(request)
        return None
