"""A downstream's check of Gatehouse's scoped credentials, with the public keys alone.

This is what any service Gatehouse calls does, and all it needs: the JWKS URL
(Gatehouse's `/.well-known/jwks.json`), the audience it answers to and the issuer it
trusts. It imports nothing from Gatehouse — the standard library and PyJWT only — so
it proves that a credential can be checked by someone who holds no Gatehouse secret.
The demo services (demo.views) verify through it; run as a program it is a tiny
downstream of its own (`python demo/verifier.py --help`), which the tests start as
a separate process.

A credential is accepted only if it is an EdDSA JWT signed by a key of the JWK Set,
for this audience and issuer, unexpired, living at most 60 seconds, for this
operation, this resource and a scope the route allows. A jti that already took
effect is refused by the caller's spent-jti store (`SpentJtis`, or a table).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt

ALGORITHM = "EdDSA"
MAX_LIFETIME_SECONDS = 60
REQUIRED_CLAIMS = ["iss", "aud", "sub", "jti", "iat", "nbf", "exp", "operation", "resource", "call", "scope"]
# Which credential scopes each route of a downstream accepts.
ROUTE_SCOPES = {"execute": ("execute",), "preview": ("preview", "execute"), "verify": ("verify", "execute")}


class Refused(Exception):
    """The credential does not authorise this request; `reason` is a stable code, the message says why."""

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
    jti: str
    expires_at: int


def bearer(authorization: str | None) -> str | None:
    """Return the token of an `Authorization: Bearer <token>` header value, or None."""
    kind, _, token = (authorization or "").partition(" ")
    if kind.lower() != "bearer":
        return None
    return token.strip() or None


class Verifier:
    """Checks credentials against the JWK Set at `jwks_url`, kept for `lifespan` seconds."""

    def __init__(self, jwks_url: str, *, audience: str, issuer: str, lifespan: float = 300) -> None:
        # An unknown kid (a key just rotated in) fetches the set again, at most every 5 s.
        self.keys = jwt.PyJWKClient(jwks_url, lifespan=lifespan, timeout=5, cooldown_duration=5)
        self.audience = audience
        self.issuer = issuer

    def verify(self, token: str | None, operation: str, resource: str | None, scopes: tuple[str, ...]) -> Claims:
        """Return the claims of `token` if it authorises `operation` on `resource` in one of `scopes`."""
        if not token:
            raise Refused("missing", "No credential: send 'Authorization: Bearer <scoped credential>'.")
        claims = self.decode(token)
        if claims.operation != operation:
            raise Refused("wrong_operation", f"The credential is for {claims.operation!r}, not {operation!r}.")
        if claims.resource != (resource or ""):
            raise Refused("wrong_resource", "The credential is for another resource.")
        if claims.scope not in scopes:
            raise Refused("wrong_scope", f"A {claims.scope!r} credential cannot do this.")
        return claims

    def decode(self, token: str) -> Claims:
        """Return the claims of a genuine, current credential for this audience and issuer."""
        key = self.signing_key(token)
        try:
            payload = jwt.decode(
                token,
                key,
                algorithms=[ALGORITHM],
                audience=self.audience,
                issuer=self.issuer,
                options={"require": REQUIRED_CLAIMS},
            )
        except jwt.ExpiredSignatureError:
            raise Refused("expired", "The credential has expired.") from None
        except jwt.InvalidAudienceError:
            raise Refused("wrong_audience", f"The credential is not for {self.audience}.") from None
        except jwt.InvalidIssuerError:
            raise Refused("wrong_issuer", f"The credential was not issued by {self.issuer}.") from None
        except (jwt.ImmatureSignatureError, jwt.InvalidIssuedAtError):
            raise Refused("not_yet_valid", "The credential is not valid yet.") from None
        except jwt.InvalidSignatureError:
            raise Refused("bad_signature", "The credential's signature does not match its content.") from None
        except jwt.InvalidTokenError as exc:
            raise Refused("invalid", f"The credential is not valid: {exc}.") from None
        if payload["exp"] - payload["iat"] > MAX_LIFETIME_SECONDS:
            raise Refused("too_long_lived", f"A credential may live {MAX_LIFETIME_SECONDS} s at most.")
        return _claims(payload)

    def signing_key(self, token: str) -> jwt.PyJWK:
        """Return the published key the token names; refuse another algorithm or an unknown key."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise Refused("invalid", "The credential is not a JWT.") from None
        if header.get("alg") != ALGORITHM:
            raise Refused("wrong_algorithm", f"Algorithm {header.get('alg')!r} is refused: only {ALGORITHM}.")
        try:
            self.keys.get_signing_keys()
        except jwt.PyJWKClientConnectionError:
            raise Refused("keys_unavailable", "The issuer's public keys cannot be fetched.") from None
        except (jwt.PyJWKClientError, jwt.PyJWKSetError) as exc:
            raise Refused("no_usable_key", f"The issuer's JWK Set has no usable key: {exc}") from None
        try:
            key = self.keys.get_signing_key(str(header.get("kid")))
        except jwt.PyJWKClientError:
            raise Refused("unknown_key", "The credential was signed by a key the issuer does not publish.") from None
        if key.algorithm_name != ALGORITHM:
            raise Refused("wrong_algorithm", f"Key {key.key_id} is not an {ALGORITHM} key.")
        return key


def _claims(payload: dict[str, object]) -> Claims:
    return Claims(
        operation=str(payload["operation"]),
        resource=str(payload["resource"]),
        call_id=str(payload["call"]),
        agent=str(payload["sub"]),
        approval_ref=str(payload.get("approval", "")),
        scope=str(payload["scope"]),
        jti=str(payload["jti"]),
        expires_at=int(str(payload["exp"])),
    )


class SpentJtis:
    """The jtis that already took effect, in memory (a downstream of one process; more share a table)."""

    def __init__(self) -> None:
        self._spent: set[str] = set()
        self._lock = threading.Lock()

    def spend(self, jti: str) -> None:
        """Mark `jti` as used for an effect; refuse one used before."""
        with self._lock:
            if jti in self._spent:
                raise Refused("replayed", "This credential was already used for an effect.")
            self._spent.add(jti)


# ------------------------------------------------------------------ as a program: a minimal downstream


def serve(verifier: Verifier, port: int) -> ThreadingHTTPServer:
    """Return a server answering `POST /check` {operation, resource, route} with the verdict on its credential."""
    spent = SpentJtis()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            route = str(body.get("route", "execute"))
            try:
                token = bearer(self.headers.get("Authorization"))
                claims = verifier.verify(token, body.get("operation", ""), body.get("resource"), ROUTE_SCOPES[route])
                if route == "execute":
                    spent.spend(claims.jti)
                self.answer(200, {"accepted": True, "claims": asdict(claims)})
            except Refused as exc:
                self.answer(403, {"error": "forbidden", "reason": exc.reason, "message": exc.message})

        def answer(self, status: int, body: dict[str, object]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:  # quiet: the verdicts are the output
            return

    return ThreadingHTTPServer(("127.0.0.1", port), Handler)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description="A downstream that checks Gatehouse credentials (POST /check).")
    parser.add_argument("--jwks", required=True, help="Gatehouse's JWKS URL (…/.well-known/jwks.json)")
    parser.add_argument("--audience", required=True, help="the aud this downstream answers to")
    parser.add_argument("--issuer", required=True, help="the iss it trusts")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--lifespan", type=float, default=300, help="seconds the JWK Set is kept")
    options = parser.parse_args(argv)
    verifier = Verifier(options.jwks, audience=options.audience, issuer=options.issuer, lifespan=options.lifespan)
    server = serve(verifier, options.port)
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
