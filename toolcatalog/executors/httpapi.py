"""The `http` executor kind: a plain HTTP API, its request configured in the admin.

The tool's executor reference is a URL template: `{name}` stands for the argument
`name`, percent-encoded (a `/` in it cannot add a path segment), and may appear only
after the origin, so no argument ever chooses the host a request goes to. The tool's
HttpEndpoint says the method, the body (the arguments, a template, or none), which
field of the answer is the result (a JSON pointer), which statuses are permanent and
how long to wait; its HttpHeaders ride on every request (secret values are decrypted
here only, and masked in whatever the downstream answers).

Every request carries `Idempotency-Key` (the same for every attempt at one call) and
the call's scoped credential: `Authorization: Bearer <credential>`, or
`Gatehouse-Credential: <credential>` when the tool's own headers set `Authorization`
(an API key of its own).

What an attempt's ending means to the worker:

- not sent (refused, unresolvable, connect timeout, TLS): RetryableError;
- sent, no answer (read timeout, connection lost): OutcomeUnknown, a person reconciles
  it; a tool marked read-only or idempotent is retried instead;
- a permanent status (default: every 4xx but 408, 425, 429), a redirect: PermanentError;
- any other status from 400 up: RetryableError, with backoff;
- 2xx: the result; without the configured result field, OutcomeUnknown.

A plain API has no dry run and no read-back: the preview shows the request approval
will send (headers by name only), and a 2xx answer is the confirmation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

import urllib3
from django.db import DatabaseError
from opentelemetry.propagate import inject
from urllib3.exceptions import ConnectTimeoutError, HTTPError, ProtocolError, ReadTimeoutError

from audit.typealiases import JSONObject, JSONValue
from toolcatalog.executors.base import (
    ExecutionContext,
    Executor,
    ExecutorError,
    OutcomeUnknown,
    PermanentError,
    RetryableError,
    Verification,
)
from toolcatalog.executors.http import pool_for
from toolcatalog.models import HttpBody, HttpEndpoint, Tool
from toolcatalog.sensitive import is_sensitive
from vault.secrets import MASK, SecretUnreadable

PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
WHOLE_PLACEHOLDER = re.compile(r"^\{([^{}]+)\}$")
CREDENTIAL_HEADER = "Gatehouse-Credential"
# Set by the executor itself, or by the HTTP connection: a tool's headers may not replace them.
RESERVED_HEADERS = frozenset(
    {"idempotency-key", "gatehouse-credential", "content-type", "content-length", "host", "transfer-encoding"}
)
DEFAULT_RETRYABLE_4XX = frozenset({408, 425, 429})
CONNECT_TIMEOUT_SECONDS = 3.0
TEXT_LIMIT = 2000
_MISSING = object()


@dataclass(frozen=True)
class RequestSpec:
    """One `http` tool's request, as configured now."""

    url_template: str
    method: str = "POST"
    body: str = HttpBody.ARGUMENTS
    body_template: JSONValue = None
    result_pointer: str = ""
    permanent_statuses: str = ""
    timeout_seconds: float = 20.0
    headers: tuple[tuple[str, str], ...] = ()
    secrets: tuple[str, ...] = ()
    repeat_safe: bool = False

    @classmethod
    def of(cls, tool: Tool) -> RequestSpec:
        """Return the tool's request (the defaults where it has no HttpEndpoint)."""
        endpoint = HttpEndpoint.objects.filter(tool=tool).first() or HttpEndpoint(tool=tool)
        rows = list(tool.http_headers.order_by("name"))
        return cls(
            url_template=tool.executor_ref,
            method=endpoint.method,
            body=endpoint.body,
            body_template=endpoint.body_template,
            result_pointer=endpoint.result_pointer,
            permanent_statuses=endpoint.permanent_statuses,
            timeout_seconds=float(endpoint.timeout_seconds),
            headers=tuple((row.name, row.secret or row.value) for row in rows),
            secrets=tuple(row.secret for row in rows if row.secret),
            repeat_safe=tool.read_only_hint or tool.idempotent_hint,
        )

    def is_permanent(self, status: int) -> bool:
        """Return whether an answer with `status` (≥ 400) fails the call at once."""
        if self.permanent_statuses.strip():
            return status in parse_statuses(self.permanent_statuses)
        return 400 <= status < 500 and status not in DEFAULT_RETRYABLE_4XX


class HttpApiExecutor(Executor):
    """Sends one configured request per attempt to a plain HTTP API."""

    def spec(self, ctx: ExecutionContext) -> RequestSpec:
        """Return the request of the context's tool, read afresh (an admin may have changed it).

        Nothing was sent yet: a database that fails now is worth another attempt, a secret
        no configured key decrypts is not.
        """
        try:
            tool = Tool.objects.filter(name=ctx.tool_name).first()
            if tool is None:
                raise PermanentError(f"no tool named {ctx.tool_name!r}")
            return RequestSpec.of(tool)
        except DatabaseError as exc:
            raise RetryableError(f"the request of {ctx.tool_name} could not be read: {type(exc).__name__}") from exc
        except SecretUnreadable as exc:
            raise PermanentError(f"a header secret of {ctx.tool_name} cannot be decrypted: set it again") from exc

    def execute(self, ctx: ExecutionContext) -> JSONObject:
        """Send the request once; return the answer's result field."""
        spec = self.spec(ctx)
        url, body = fill_url(spec.url_template, ctx.arguments), request_body(spec, ctx.arguments)
        headers = request_headers(spec, ctx, has_body=body is not None)
        try:
            response = pool_for(url).request(
                spec.method,
                url,
                body=body,
                headers=headers,
                timeout=urllib3.Timeout(connect=CONNECT_TIMEOUT_SECONDS, read=spec.timeout_seconds),
                retries=False,
                redirect=False,
            )
        except (HTTPError, ValueError) as exc:
            raise unanswered(spec, exc) from exc
        return answer(spec, response.status, response.data)

    def dry_run(self, ctx: ExecutionContext) -> JSONObject:
        """Send nothing: an HTTP API has no dry run. Return the request approval would send, for the reviewer."""
        spec = self.spec(ctx)
        body = request_body(spec, ctx.arguments)
        request: JSONObject = {
            "method": spec.method,
            "url": fill_url(spec.url_template, ctx.arguments),
            "headers": [name for name, _ in spec.headers],
            "body": None if body is None else json.loads(body),
        }
        summary = "This HTTP API offers no dry run: approving sends the request below."
        return {"summary": summary, "before": None, "after": {"request": request}}

    def verify(self, ctx: ExecutionContext, result: JSONObject) -> Verification:
        """Confirm by the answer itself: a plain HTTP API offers nothing to read the effect back with."""
        return Verification(confirmed=True, observed={}, detail="The HTTP API answered 2xx (it offers no read-back).")


# ------------------------------------------------------------------ the request


def placeholders(template: str) -> list[str]:
    """Return the argument names a URL template names, in order."""
    return PLACEHOLDER.findall(template)


def fill_url(template: str, arguments: JSONObject) -> str:
    """Return the URL with every `{name}` replaced by that argument, percent-encoded."""
    path_end = _path_end(template)

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        text = _url_text(name, arguments.get(name, _MISSING))
        if match.start() < path_end and text in {"", ".", ".."}:
            raise PermanentError(f"argument {name!r} is {text!r}: it would change the URL's path")
        return quote(text, safe="")

    return PLACEHOLDER.sub(replace, template)


def _path_end(template: str) -> int:
    """Return where the template's path ends (its query or fragment begins)."""
    ends = [index for index in (template.find("?"), template.find("#")) if index >= 0]
    return min(ends, default=len(template))


def _url_text(name: str, value: object) -> str:
    if value is _MISSING:
        raise PermanentError(f"the URL needs argument {name!r}, which the call does not have")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise PermanentError(f"argument {name!r} is not a string, number or boolean: it cannot go into a URL")


def request_body(spec: RequestSpec, arguments: JSONObject) -> bytes | None:
    """Return the JSON body to send, or None for none."""
    if spec.body == HttpBody.NONE:
        return None
    value = fill_template(spec.body_template, arguments) if spec.body == HttpBody.TEMPLATE else arguments
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def fill_template(template: JSONValue, arguments: JSONObject) -> JSONValue:
    """Return the body template with each string that is exactly `{name}` replaced by that argument's value.

    An absent argument leaves its key out of an object, and is null in a list.
    """
    if isinstance(template, str) and (match := WHOLE_PLACEHOLDER.match(template)):
        return arguments.get(match.group(1))
    if isinstance(template, dict):
        return {
            key: fill_template(value, arguments)
            for key, value in template.items()
            if not _names_absent(value, arguments)
        }
    if isinstance(template, list):
        return [fill_template(item, arguments) for item in template]
    return template


def _names_absent(value: JSONValue, arguments: JSONObject) -> bool:
    match = WHOLE_PLACEHOLDER.match(value) if isinstance(value, str) else None
    return match is not None and match.group(1) not in arguments


def template_names(template: JSONValue) -> set[str]:
    """Return the argument names a body template refers to."""
    if isinstance(template, str) and (match := WHOLE_PLACEHOLDER.match(template)):
        return {match.group(1)}
    values: Iterable[JSONValue] = template.values() if isinstance(template, dict) else ()
    if isinstance(template, list):
        values = template
    names: set[str] = set()
    for value in values:
        names |= template_names(value)
    return names


def request_headers(spec: RequestSpec, ctx: ExecutionContext, *, has_body: bool) -> dict[str, str]:
    """Return the request's headers: the tool's own, the idempotency key, and the scoped credential."""
    headers = {"Accept": "application/json", **dict(spec.headers)}
    if has_body:
        headers["Content-Type"] = "application/json"
    if ctx.idempotency_key:
        headers["Idempotency-Key"] = ctx.idempotency_key
    if any(name.lower() == "authorization" for name in headers):
        headers[CREDENTIAL_HEADER] = ctx.credential  # the API's own key keeps Authorization
    else:
        headers["Authorization"] = f"Bearer {ctx.credential}"
    inject(headers)  # the current trace's traceparent, when tracing is on (approvals.telemetry)
    return headers


# ------------------------------------------------------------------ what came back


def unanswered(spec: RequestSpec, exc: HTTPError | ValueError) -> ExecutorError:
    """Classify a request that got no answer: not sent → retried; sent → unknown, unless safe to repeat."""
    where = {"method": spec.method, "url_template": spec.url_template}
    if isinstance(exc, ValueError):  # a malformed URL or header: no attempt will do better
        return PermanentError(f"{spec.method} {spec.url_template} cannot be requested: {exc}", detail=where)
    sent = isinstance(exc, ReadTimeoutError | ProtocolError) and not isinstance(exc, ConnectTimeoutError)
    if not sent:
        return RetryableError(f"{spec.method} {spec.url_template} was not sent: {type(exc).__name__}", detail=where)
    what = "no answer in time" if isinstance(exc, ReadTimeoutError) else "the connection was lost"
    message = f"{spec.method} {spec.url_template} was sent and {what}"
    if spec.repeat_safe:  # read-only or idempotent: sending it again cannot double an effect
        return RetryableError(message, detail=where)
    return OutcomeUnknown(message + ": it may have taken effect, so it is not sent again", detail=where)


def answer(spec: RequestSpec, status: int, data: bytes) -> JSONObject:
    """Return the result of a 2xx answer; raise the classified error of any other."""
    payload = redacted(_decoded(data), spec.secrets)
    where = f"{spec.method} {spec.url_template}"
    detail: JSONObject = {"status": status, "body": payload}
    if status >= 400 and spec.is_permanent(status):
        message = payload.get("message") if isinstance(payload, dict) else None
        raise PermanentError(str(message or f"{where} answered {status}"), detail=detail)
    if status >= 400:
        raise RetryableError(f"{where} answered {status}", detail=detail)
    if status >= 300 or status < 200:
        raise PermanentError(f"{where} answered {status} (redirects are not followed)", detail=detail)
    return result_of(spec, status, payload)


def result_of(spec: RequestSpec, status: int, payload: JSONValue) -> JSONObject:
    """Return the configured field of a 2xx answer as the call's result (an object: a value is wrapped)."""
    value = payload
    if spec.result_pointer:
        value = resolve_pointer(payload, spec.result_pointer)
        if value is _MISSING:
            message = f"{spec.method} {spec.url_template} answered {status} without {spec.result_pointer}"
            raise OutcomeUnknown(message + ": check what it did", detail={"status": status, "body": payload})
    if isinstance(value, dict):
        return value
    return {} if value is None else {"result": value}


def _decoded(data: bytes) -> JSONValue:
    """Return the answer's JSON, else its text (shortened), else None for an empty answer."""
    if not data:
        return None
    try:
        value: JSONValue = json.loads(data)
    except ValueError:
        return data[:TEXT_LIMIT].decode("utf-8", errors="replace")
    return value


def resolve_pointer(document: JSONValue, pointer: str) -> object:
    """Return the value a JSON pointer (RFC 6901) names in `document`, or _MISSING."""
    value: object = document
    for raw in pointer.split("/")[1:]:
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(value, dict) and token in value:
            value = value[token]
        elif isinstance(value, list) and token.isdigit() and int(token) < len(value):
            value = value[int(token)]
        else:
            return _MISSING
    return value


def redacted(value: JSONValue, secrets: tuple[str, ...]) -> JSONValue:
    """Return `value` with every secret header value the downstream echoed replaced by the mask."""
    if not secrets:
        return value
    if isinstance(value, str):
        return _redacted_text(value, secrets)
    if isinstance(value, dict):
        return {_redacted_text(key, secrets): redacted(item, secrets) for key, item in value.items()}
    if isinstance(value, list):
        return [redacted(item, secrets) for item in value]
    return value


def _redacted_text(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        text = text.replace(secret, MASK)
    return text


# ------------------------------------------------------------------ configuration checks (admin forms)


def parse_statuses(text: str) -> frozenset[int]:
    """Return the statuses `400-499, 501` names; raise ValueError naming a bad part."""
    statuses: set[int] = set()
    for part in filter(None, (piece.strip() for piece in text.split(","))):
        low, _, high = part.partition("-")
        if not low.strip().isdigit() or (high and not high.strip().isdigit()):
            raise ValueError(f"{part!r} is not a status or a range of statuses (e.g. 409 or 400-499)")
        first, last = int(low), int(high or low)
        if not 100 <= first <= last <= 599:
            raise ValueError(f"{part!r} is not within 100-599, low to high")
        statuses.update(range(first, last + 1))
    return frozenset(statuses)


def url_template_problems(template: str, properties: Mapping[str, JSONValue]) -> list[str]:
    """Return why `template` cannot be the URL template of a tool whose schema has `properties` ([] if it can)."""
    if not template.startswith(("http://", "https://")):
        return ["An HTTP API's URL template is an absolute http(s):// URL."]
    parts = urlsplit(PLACEHOLDER.sub("x", template))
    origin_end = template.find("/", len(parts.scheme) + 3)
    if "{" in template[: origin_end if origin_end >= 0 else len(template)] or not parts.hostname:
        return ["The URL's origin (scheme://host:port) must be fixed: arguments go in its path or query only."]
    names = placeholders(template)
    problems = [f"{{{name}}} names no property of the input schema." for name in names if name not in properties]
    # Servers, proxies and logs keep URLs: a secret goes in the body, where the schema's masking follows it.
    secret = [name for name in names if is_sensitive(properties.get(name))]
    return problems + [f"{{{name}}} is a sensitive argument: send it in the body, not the URL." for name in secret]


def body_template_problems(template: JSONValue, properties: Iterable[str]) -> list[str]:
    """Return why a body template names arguments the schema lacks ([] if it names none)."""
    known = set(properties)
    return [f'"{{{name}}}" names no property of the input schema.' for name in sorted(template_names(template) - known)]
