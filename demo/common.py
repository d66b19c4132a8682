"""What every demo service shares: its error type, argument readers and money formatting."""

from __future__ import annotations

import hashlib
import json

from audit.typealiases import JSONObject, JSONValue


class ServiceError(Exception):
    """A refusal the service answers with `status` and `{"error": code, "message": …}`."""

    def __init__(self, status: int, code: str, message: str, **details: JSONValue) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details

    def body(self) -> JSONObject:
        """Return the JSON body of the refusal."""
        return {"error": self.code, "message": self.message, **self.details}


def text_arg(arguments: JSONObject, name: str) -> str:
    """Return a required non-empty string argument, or refuse with 422."""
    value = arguments.get(name)
    if not isinstance(value, str) or not value:
        raise ServiceError(422, "invalid_arguments", f"{name} must be a non-empty string.")
    return value


def int_arg(arguments: JSONObject, name: str, low: int, high: int) -> int:
    """Return a required integer argument within [low, high], or refuse with 422."""
    value = arguments.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ServiceError(422, "invalid_arguments", f"{name} must be an integer from {low} to {high}.")
    return value


def request_hash(arguments: JSONObject) -> str:
    """Return the hash a repeat with the same idempotency key must match."""
    return hashlib.sha256(json.dumps(arguments, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def brl(centavos: int) -> str:
    """Return an amount in cents as Brazilian reais: 123456 → "R$ 1.234,56"."""
    whole, cents = divmod(centavos, 100)
    return f"R$ {whole:,}".replace(",", ".") + f",{cents:02d}"


def conflict_if_different(stored_hash: str, arguments: JSONObject) -> None:
    """Refuse a repeat of an idempotency key with other arguments (Stripe semantics)."""
    if stored_hash != request_hash(arguments):
        raise ServiceError(
            409, "idempotency_conflict", "This Idempotency-Key was already used with different arguments."
        )
