"""Request guards: oversized API bodies, and a database that went away mid-request."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse

from approvals.errors import ApiError, error_response

log = logging.getLogger(__name__)
API_PREFIXES = ("/api/", "/mcp")


class ApiBodyLimitMiddleware:
    """Answer 413 `payload_too_large` to API requests whose declared body exceeds the limit."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith(API_PREFIXES) and self._too_large(request):
            limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
            return error_response(
                ApiError("payload_too_large", f"Request bodies are limited to {limit} bytes.", limit_bytes=limit)
            )
        return self.get_response(request)

    @staticmethod
    def _too_large(request: HttpRequest) -> bool:
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return False
        return length > settings.DATA_UPLOAD_MAX_MEMORY_SIZE


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
