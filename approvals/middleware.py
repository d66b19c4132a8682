"""Refuse oversized API bodies before anything reads them."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from approvals.errors import ApiError, error_response

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
