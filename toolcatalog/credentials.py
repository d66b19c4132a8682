"""Scoped credentials: a signed JWT authorising one operation on one resource for one attempt at one call.

Gatehouse mints a fresh credential for every execution attempt (seed 000: "uma
credencial de curta duração e escopo mínimo"). It is a JWT (RFC 7519) signed with
the active Ed25519 key (`vault.signing`, JOSE algorithm EdDSA), so a downstream
checks it with the public keys at `/.well-known/jwks.json` and any standard JWT
library — it holds nothing that could mint one. The claims:

    iss        this Gatehouse (settings.GATEHOUSE_ISSUER)
    aud        the downstream the tool acts on (`audience_for`)
    sub        the agent that proposed the call
    jti        the attempt (`<call>/<attempt>/<scope>`): a downstream applies an effect once per jti
    iat, nbf, exp   exp ≤ iat + 60 s
    operation  the tool;  resource: the value of its resource argument ("" if none)
    call       the call's id;  approval: what its permission rests on;  scope: execute | preview | verify

The agent's own token never leaves Gatehouse. docs/credentials.md shows a downstream's check.
"""

from __future__ import annotations

import time
import uuid
from urllib.parse import urlsplit

import jwt
from django.conf import settings

from toolcatalog.executors.http import GatehouseProtocolExecutor
from toolcatalog.models import ExecutorKind, Tool
from vault import signing

MAX_TTL_SECONDS = 60


class Scope:
    """What a credential lets its bearer do with the operation it names."""

    EXECUTE = "execute"  # apply the effect (and read it back within the same attempt)
    PREVIEW = "preview"  # dry-run only: read the resource, change nothing
    VERIFY = "verify"  # read the effect back after an attempt


def audience_for(tool: Tool) -> str:
    """Return the `aud` of the tool's credentials: its own setting, else its downstream's origin.

    An HTTP tool's downstream is the origin (scheme://host[:port]) its endpoint is
    reached at, so two tools served by one service share an audience and a credential
    for one service is refused by every other. A Python tool runs inside Gatehouse:
    its executor's dotted path names it.
    """
    if tool.audience:
        return tool.audience
    # An HTTP API's URL template takes arguments only after its origin (toolcatalog.forms checks it).
    if tool.executor_kind in (ExecutorKind.GATEHOUSE_PROTOCOL, ExecutorKind.HTTP):
        parts = urlsplit(GatehouseProtocolExecutor(tool.executor_ref).url())
        return f"{parts.scheme}://{parts.netloc}"
    return f"python:{tool.executor_ref}"


def attempt_jti(call_id: str, attempt: int, scope: str) -> str:
    """Return the jti of an attempt's credential: the same attempt can take effect once downstream."""
    return f"{call_id}/{attempt}/{scope}"


def mint(
    *,
    operation: str,
    resource: str | None,
    call_id: str,
    agent: str,
    approval_ref: str,
    audience: str,
    scope: str = Scope.EXECUTE,
    jti: str | None = None,
    ttl: int = MAX_TTL_SECONDS,
    now: float | None = None,
) -> str:
    """Return a signed credential for `operation` on `resource`, valid for `ttl` (at most 60) seconds.

    `jti` defaults to a fresh random one (a preview's). `now` lets a caller issue a
    credential at another moment (tests build expired ones).
    """
    issued = int(time.time() if now is None else now)
    claims = {
        "iss": settings.GATEHOUSE_ISSUER,
        "aud": audience,
        "sub": agent,
        "jti": jti or f"{call_id or 'preview'}/{uuid.uuid4().hex}",
        "iat": issued,
        "nbf": issued,
        "exp": issued + max(1, min(ttl, MAX_TTL_SECONDS)),
        "operation": operation,
        "resource": resource or "",
        "call": call_id,
        "approval": approval_ref,
        "scope": scope,
    }
    key = signing.keyring().active
    return jwt.encode(claims, key.private, algorithm=signing.ALGORITHM, headers={"kid": key.kid, "typ": "JWT"})
