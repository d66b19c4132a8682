"""Scoped credentials: a signed token authorising one operation on one resource for one call.

Gatehouse mints a fresh credential for every execution attempt (seed 000: "uma
credencial de curta duração e escopo mínimo"). It names the operation (the tool),
the resource (the value of the tool's resource argument), the call, the agent and
the approval it rests on, and expires within 60 seconds. The downstream service
checks it with `verify()`; the agent's own token never leaves Gatehouse.

Tokens are signed with Django's signing framework (HMAC over SECRET_KEY with a
salt of their own, so no other signed value of the site can pass for one).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import asdict, dataclass

from django.core import signing

SALT = "gatehouse.scoped-credential.v1"
MAX_TTL_SECONDS = 60


class Scope:
    """What a credential lets its bearer do with the operation it names."""

    EXECUTE = "execute"  # apply the effect (and read it back within the same attempt)
    PREVIEW = "preview"  # dry-run only: read the resource, change nothing
    VERIFY = "verify"  # read the effect back after an attempt


class CredentialRefused(Exception):
    """The credential does not authorise this request; the message says why (safe to show)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Claims:
    """What a verified credential says."""

    operation: str
    resource: str
    call_id: str
    agent: str
    approval_ref: str
    scope: str
    expires_at: int
    nonce: str


def mint(
    *,
    operation: str,
    resource: str | None,
    call_id: str,
    agent: str,
    approval_ref: str,
    scope: str = Scope.EXECUTE,
    ttl: int = MAX_TTL_SECONDS,
    now: float | None = None,
) -> str:
    """Return a signed credential for `operation` on `resource`, valid for `ttl` (at most 60) seconds.

    `now` lets a caller issue a credential at another moment (tests build expired ones).
    """
    issued = time.time() if now is None else now
    claims = Claims(
        operation=operation,
        resource=resource or "",
        call_id=call_id,
        agent=agent,
        approval_ref=approval_ref,
        scope=scope,
        expires_at=int(issued) + min(ttl, MAX_TTL_SECONDS),
        # Two credentials for the same attempt differ, so none can be confused with another.
        nonce=secrets.token_hex(8),
    )
    return signing.dumps(asdict(claims), salt=SALT, compress=False)


def verify(
    token: str | None, operation: str, resource: str | None, *, scopes: tuple[str, ...] = (Scope.EXECUTE,)
) -> Claims:
    """Return the claims of `token` if it authorises `operation` on `resource` in one of `scopes`.

    Raises CredentialRefused naming the first problem: missing, invalid, expired,
    wrong operation, wrong resource or wrong scope.
    """
    if not token:
        raise CredentialRefused("missing", "No credential: send 'Authorization: Bearer <scoped credential>'.")
    try:
        # max_age bounds the signature's own timestamp too: even a forged-long `expires_at` dies in 60 s.
        raw = signing.loads(token, salt=SALT, max_age=MAX_TTL_SECONDS)
        claims = Claims(**raw)
    except signing.SignatureExpired:
        raise CredentialRefused("expired", "The credential has expired.") from None
    except (signing.BadSignature, TypeError, ValueError):
        raise CredentialRefused("invalid", "The credential is not valid.") from None
    if claims.expires_at <= time.time():
        raise CredentialRefused("expired", "The credential has expired.")
    if claims.operation != operation:
        raise CredentialRefused("wrong_operation", f"The credential is for {claims.operation!r}, not {operation!r}.")
    if claims.resource != (resource or ""):
        raise CredentialRefused("wrong_resource", "The credential is for another resource.")
    if claims.scope not in scopes:
        raise CredentialRefused("wrong_scope", f"A {claims.scope!r} credential cannot do this.")
    return claims


def bearer(authorization: str | None) -> str | None:
    """Return the token of an `Authorization: Bearer <token>` header value, or None."""
    if not authorization:
        return None
    kind, _, token = authorization.partition(" ")
    if kind.lower() != "bearer":
        return None
    return token.strip() or None
