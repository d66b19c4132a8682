"""The `/mcp` ASGI endpoint: checks in front of the SDK's Streamable HTTP session manager.

In order, before the SDK sees a request (only POST: the endpoint is stateless,
so there is no GET stream and no session to DELETE — 405):

1. Host and Origin (DNS-rebinding protection): Host must pass Django's own
   ALLOWED_HOSTS rules (wildcards included, which the SDK's exact-match lists
   cannot express); a browser Origin must be one of this deployment's hosts, a
   CSRF_TRUSTED_ORIGINS entry or a GATEHOUSE_MCP_ALLOWED_ORIGINS entry
   (`scheme://host:*` allows any port). Foreign Origin → 403.
2. Bearer token → the agent: a static agent token (`Agent.authenticate`), or an
   OAuth access token issued for this `/mcp` (`oauth.bearer`: the agent its person
   chose at consent, and that person, who rides in the scope too). None, unknown,
   expired, revoked or for another resource → 401, without the `mcp` scope → 403,
   each with a `WWW-Authenticate` naming the resource metadata (RFC 9728); over its
   per-minute rate limit → 429, as on REST. Identity never comes from the message body.
3. The body: sent as application/json (else 400 `malformed_request`, where the SDK
   would answer in plain text), at most DATA_UPLOAD_MAX_MEMORY_SIZE (413), strict JSON
   (`approvals.jsonbody`: no NaN, duplicate keys, NUL, lone surrogates or deep
   nesting) else JSON-RPC -32700, one JSON-RPC 2.0 object else -32600.

Each request runs in its own `ThreadSensitiveContext` (as Django's ASGI handler
does), so its ORM calls share one worker thread and its database connection is
released when it ends.
"""

from __future__ import annotations

import json
import logging
from contextlib import AsyncExitStack
from urllib.parse import urlsplit

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.db import DatabaseError, close_old_connections
from django.http.request import split_domain_port, validate_host
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import INVALID_REQUEST, PARSE_ERROR
from starlette.types import Message, Receive, Scope, Send

from agents.models import TOKEN_PREFIX, Agent
from approvals import telemetry
from approvals.errors import ApiError, error_body
from approvals.jsonbody import loads_strict
from approvals.mcp.identity import AGENT_SCOPE_KEY, ON_BEHALF_OF_SCOPE_KEY
from approvals.mcp.server import build_server
from approvals.proposals import enforce_rate_limit
from audit.typealiases import JSONObject
from oauth import bearer as oauth_bearer
from oauth.bearer import Caller, Refusal

log = logging.getLogger(__name__)

JsonBody = JSONObject


class McpEndpoint:
    """ASGI app for `/mcp` (and the ASGI lifespan, which runs the SDK's session manager)."""

    def __init__(self) -> None:
        self.manager = StreamableHTTPSessionManager(
            app=build_server(),
            json_response=True,
            stateless=True,
            # Host and Origin are checked in front (step 1), with Django's rules;
            # the SDK still enforces the JSON content type and its body limit.
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            max_request_body_size=settings.DATA_UPLOAD_MAX_MEMORY_SIZE,
        )
        self.running = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.lifespan(receive, send)
        elif scope["type"] == "http":
            await self.http(scope, receive, send)

    async def lifespan(self, receive: Receive, send: Send) -> None:
        """Run the session manager from startup to shutdown (it owns the SDK's task group)."""
        await receive()  # lifespan.startup
        async with AsyncExitStack() as stack:
            try:
                await stack.enter_async_context(self.manager.run())
            except Exception as exc:  # noqa: BLE001 — reported to the server, which refuses to start
                await send({"type": "lifespan.startup.failed", "message": str(exc)})
                return
            self.running = True
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
            self.running = False
        await send({"type": "lifespan.shutdown.complete"})

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check, authenticate and hand one HTTP request to the SDK."""
        headers = _headers(scope)
        rejection = transport_rejection(headers)
        if rejection is not None:
            await _send_json(send, *rejection)
            return
        if scope["method"] != "POST":
            # Stateless: there is no session to stream on or to delete, so no GET
            # stream (it would stay open with nothing to send) and no DELETE.
            message = "This MCP endpoint is stateless: send JSON-RPC messages with POST."
            await _send_json(send, 405, error_body("method_not_allowed", message), {"allow": "POST"})
            return
        if not self.running:
            body = error_body(
                "service_unavailable", "The MCP endpoint needs the ASGI lifespan; start the server with it."
            )
            await _send_json(send, 503, body)
            return
        async with ThreadSensitiveContext():
            try:
                await self._authenticated(scope, receive, send, headers)
            finally:
                await sync_to_async(close_old_connections)()

    async def _authenticated(self, scope: Scope, receive: Receive, send: Send, headers: dict[str, str]) -> None:
        site = _site(scope, headers)
        try:
            caller = await sync_to_async(authenticate)(_bearer(headers.get("authorization", "")), f"{site}/mcp")
        except ApiError as error:  # rate_limited, exactly as the REST API answers it
            await _send_json(send, error.status, error.body(), {k.lower(): v for k, v in error.headers.items()})
            return
        except DatabaseError:
            log.exception("cannot authenticate an MCP request: database unavailable")
            message = "Gatehouse cannot reach its database; retry shortly."
            await _send_json(send, 503, error_body("service_unavailable", message), {"retry-after": "5"})
            return
        if caller is None or isinstance(caller, Refusal):
            await _send_json(send, *_refusal(site, caller))
            return
        if not headers.get("content-type", "").lower().startswith("application/json"):
            # The SDK would refuse it too, in plain text; agents get the API's error shape.
            message = "Send the JSON-RPC message with 'Content-Type: application/json'."
            await _send_json(send, 400, error_body("malformed_request", message))
            return
        body, problem = await _read_body(receive)
        if problem is not None:
            await _send_json(send, *problem)
            return
        identity = {AGENT_SCOPE_KEY: caller.agent, ON_BEHALF_OF_SCOPE_KEY: caller.user}
        # A traceparent header parents the SDK's spans of this request when its messages' _meta carry none.
        with telemetry.incoming(headers):
            await self.manager.handle_request({**scope, **identity}, _replay(body, receive), send)


def authenticate(token: str, resource: str) -> Caller | Refusal | None:
    """Return who holds `token` (None for no token or an unknown agent token), counted against the rate limit.

    Static agent tokens carry Gatehouse's prefix; anything else is taken for an OAuth access token.
    """
    if token.startswith(TOKEN_PREFIX):
        agent = Agent.authenticate(token)
        caller: Caller | Refusal | None = Caller(agent, None, "") if agent is not None else None
    else:
        caller = oauth_bearer.authenticate(token, resource) if token else None
    if isinstance(caller, Caller):
        enforce_rate_limit(caller.agent)
    return caller


def _refusal(site: str, refusal: Refusal | None) -> tuple[int, JsonBody, dict[str, str]]:
    """Return the 401/403 for a missing or refused token, with the challenge that says how to get a good one."""
    if refusal is None:
        message = "Send an agent token or an OAuth access token as 'Authorization: Bearer <token>'."
        return 401, error_body("unauthorized", message), {"www-authenticate": oauth_bearer.challenge(site)}
    code = "unauthorized" if refusal.status == 401 else "permission_denied"
    headers = {"www-authenticate": oauth_bearer.challenge(site, refusal)}
    return refusal.status, error_body(code, refusal.description, oauth_error=refusal.error), headers


def _site(scope: Scope, headers: dict[str, str]) -> str:
    """Return this deployment's origin as the client addressed it (Host was checked against ALLOWED_HOSTS)."""
    scheme = "https" if settings.HTTPS else str(scope.get("scheme", "http"))
    return f"{scheme}://{headers.get('host', '')}"


def _headers(scope: Scope) -> dict[str, str]:
    return {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}


def _bearer(header: str) -> str:
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def allowed_origins() -> list[str]:
    """Return the explicitly allowed browser origins (besides this deployment's own hosts)."""
    return [*settings.CSRF_TRUSTED_ORIGINS, *settings.GATEHOUSE_MCP_ALLOWED_ORIGINS]


def origin_allowed(origin: str) -> bool:
    """Return whether a browser page at `origin` may call /mcp."""
    for allowed in allowed_origins():
        if origin == allowed or (allowed.endswith(":*") and origin.startswith(allowed[:-1])):
            return True
    host = urlsplit(origin).hostname or ""
    return bool(host) and validate_host(host, settings.ALLOWED_HOSTS)


def transport_rejection(headers: dict[str, str]) -> tuple[int, JsonBody] | None:
    """Return (status, body) when Host or Origin is not this deployment's; None when both are fine."""
    domain, _ = split_domain_port(headers.get("host", ""))
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return 421, error_body("host_not_allowed", "This Host is not served here (see ALLOWED_HOSTS).")
    origin = headers.get("origin")
    if origin is not None and not origin_allowed(origin):
        return 403, error_body(
            "origin_not_allowed",
            "Requests from this Origin are refused (add it to GATEHOUSE_MCP_ALLOWED_ORIGINS to allow it).",
            origin=origin[:200],
        )
    return None


async def _read_body(receive: Receive) -> tuple[bytes, tuple[int, JsonBody] | None]:
    """Read the whole body; return it and, if it is unacceptable, the (status, body) to answer."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"", (400, error_body("malformed_request", "The request ended before its body."))
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return b"", (413, error_body("payload_too_large", f"Request bodies are limited to {limit} bytes."))
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    return body, jsonrpc_problem(body)


def jsonrpc_problem(body: bytes) -> tuple[int, JsonBody] | None:
    """Return the JSON-RPC error for a body that is not one well-formed JSON-RPC 2.0 message."""
    try:
        message = loads_strict(body)
    except ApiError as exc:
        return 400, _rpc_error(PARSE_ERROR, f"Parse error: {exc.message}")
    if not isinstance(message, dict):
        return 400, _rpc_error(INVALID_REQUEST, "Invalid Request: send one JSON-RPC 2.0 object (no batches).")
    request_id = message.get("id")
    valid_id = isinstance(request_id, str | int) and not isinstance(request_id, bool)
    echo_id = request_id if valid_id else None
    if message.get("jsonrpc") != "2.0":
        return 400, _rpc_error(INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0".', echo_id)
    if "method" in message:
        if not isinstance(message["method"], str) or not message["method"]:
            return 400, _rpc_error(INVALID_REQUEST, 'Invalid Request: "method" must be a string.', echo_id)
        if "id" in message and not valid_id:
            return 400, _rpc_error(INVALID_REQUEST, 'Invalid Request: "id" must be a string or an integer.')
        if "params" in message and not isinstance(message["params"], dict):
            return 400, _rpc_error(INVALID_REQUEST, 'Invalid Request: "params" must be an object.', echo_id)
        return None
    if valid_id and ("result" in message or "error" in message):
        return None  # a response to a server request: the SDK routes it
    return 400, _rpc_error(INVALID_REQUEST, 'Invalid Request: a request needs "method".', echo_id)


def _rpc_error(code: int, message: str, request_id: str | int | None = None) -> JsonBody:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def _replay(body: bytes, receive: Receive) -> Receive:
    """Return a `receive` that yields the already-read body once, then waits for the disconnect."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _send_json(send: Send, status: int, body: JsonBody, headers: dict[str, str] | None = None) -> None:
    payload = json.dumps(body, ensure_ascii=False).encode()
    raw_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    raw_headers += [(name.encode(), value.encode()) for name, value in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": payload})
