"""The one error shape of the agent API: `{"error": code, "message": …, …details}`.

Every error that reaches an agent (REST or MCP) is an ApiError and leaves through
`error_body()`, so a model always gets something it can act on.
"""

from __future__ import annotations

from django.http import JsonResponse

from audit.typealiases import JSONObject, JSONValue
from toolcatalog.policy import Verdict

# code → HTTP status. The OpenAPI document and the MCP adapter read this table too.
ERROR_STATUS: dict[str, int] = {
    "malformed_request": 400,
    "unauthorized": 401,
    "permission_denied": 403,
    "unknown_or_not_permitted_tool": 404,
    "not_found": 404,
    "method_not_allowed": 405,
    "idempotency_conflict": 409,
    "payload_too_large": 413,
    "invalid_arguments": 422,
    "circuit_open": 429,
    "budget_exhausted": 429,
    "rate_limited": 429,
    "internal_error": 500,
    "service_unavailable": 503,
}


class ApiError(Exception):
    """A refusal the caller can act on."""

    def __init__(self, code: str, message: str, **details: JSONValue) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details
        self.headers: dict[str, str] = {}

    @property
    def status(self) -> int:
        return ERROR_STATUS[self.code]

    def body(self) -> JSONObject:
        return error_body(self.code, self.message, **self.details)

    @classmethod
    def from_verdict(cls, verdict: Verdict, prefix: str = "") -> ApiError:
        """Return the error of a refusing verdict: its code, message, field errors, tier and rules."""
        error = cls(verdict.error_code or "permission_denied", prefix + verdict.message)
        if verdict.errors:
            error.details["errors"] = verdict.errors
        if verdict.risk_tier is not None:
            error.details.update(risk_tier=verdict.risk_tier, risk_reasons=verdict.risk_reasons)
        return error


def error_body(code: str, message: str, **details: JSONValue) -> JSONObject:
    """Return the error body every API error uses."""
    return {"error": code, "message": message, **details}


def error_response(error: ApiError) -> JsonResponse:
    """Return `error` as an HTTP response with its status and headers."""
    response = JsonResponse(error.body(), status=error.status, json_dumps_params={"ensure_ascii": False})
    for name, value in error.headers.items():
        response[name] = value
    return response
