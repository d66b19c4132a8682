"""The agent JSON API (`/api/v1/`): list tools, propose calls, read calls back.

Authentication happens once (AgentBearer sets `request.agent`, so every view takes an
`AgentRequest`); every error leaves through `approvals.errors`, in the one documented shape.
"""

from __future__ import annotations

import logging
from typing import cast

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from ninja import Field, NinjaAPI, Query, Schema
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.openapi.schema import OpenAPISchema
from ninja.parser import Parser
from ninja.security import HttpBearer
from pydantic import ConfigDict

from agents.grants import ReadGrant
from agents.models import Agent
from approvals import store, telemetry
from approvals.errors import ERROR_STATUS, ApiError, error_response
from approvals.jsonbody import loads_strict
from approvals.middleware import database_unavailable
from approvals.proposals import Proposal, ProposalIn, enforce_rate_limit, get_agent_call, propose
from approvals.serializers import call_body, tool_body
from approvals.watch import wait_for
from audit.typealiases import JSONObject, JSONValue
from toolcatalog.models import Tool

log = logging.getLogger(__name__)
# Lets clients (and schemathesis' stateful runs) follow a proposal to its call.
READ_CALL_LINK = {"operationId": "readToolCall", "parameters": {"call_id": "$response.body#/id"}}


class AgentRequest(HttpRequest):
    """An agent's request that `AgentBearer` let through (never constructed: a view's annotation).

    `agent` is the active agent holding the bearer token; `read_grant`, on a proposal,
    its grant for the tool the body names, read with it (None elsewhere); `strict_body`,
    once read, the body as `loads_strict` parsed it.
    """

    agent: Agent
    read_grant: ReadGrant | None
    strict_body: JSONValue


class StrictJsonParser(Parser):
    """Parse bodies with the strict rules of `approvals.jsonbody`."""

    def parse_body(self, request: HttpRequest) -> JSONValue:
        return strict_body(request)


def strict_body(request: HttpRequest) -> JSONValue:
    """Return the request's body parsed by `loads_strict`, once per request (authentication may read it first)."""
    api_request = cast(AgentRequest, request)  # ninja hands every hook a plain HttpRequest
    if not hasattr(api_request, "strict_body"):
        api_request.strict_body = loads_strict(request.body)
    return api_request.strict_body


class AgentBearer(HttpBearer):
    """`Authorization: Bearer <token>` → the active agent holding it.

    `with_proposed_grant`: for proposals, which need the agent and then its grant for
    the tool the body names; both are read in one statement. A body that names none
    (or is not JSON) is authenticated alone, and refused by the parser after.
    """

    def __init__(self, *, with_proposed_grant: bool = False) -> None:
        super().__init__()
        self.with_proposed_grant = with_proposed_grant

    def authenticate(self, request: HttpRequest, token: str) -> Agent | None:
        tool_name = _proposed_tool(request) if self.with_proposed_grant else None
        read: ReadGrant | None = None
        if tool_name is None:
            agent = Agent.authenticate(token)
        else:
            agent, read = store.authenticate_with_grant(token, tool_name)
        if agent is None:
            return None
        enforce_rate_limit(agent)
        # From here on the request is an AgentRequest: ninja runs the view only when this returns an agent.
        admitted = cast(AgentRequest, request)
        admitted.agent, admitted.read_grant = agent, read
        return agent


# Above it, a body is not parsed before its sender is known (what an unauthenticated request can cost).
PEEK_LIMIT_BYTES = 64 * 1024


def _proposed_tool(request: HttpRequest) -> str | None:
    """Return the tool name a proposal's body gives, or None (a malformed body is reported after authentication)."""
    if len(request.body) > PEEK_LIMIT_BYTES:
        return None
    try:
        body = strict_body(request)
    except (ApiError, ValueError):
        return None
    tool = body.get("tool") if isinstance(body, dict) else None
    # PostgreSQL cannot take a NUL in text: such a name is refused by the envelope's checks.
    return tool if isinstance(tool, str) and "\x00" not in tool else None


class GatehouseApi(NinjaAPI):
    """NinjaAPI whose OpenAPI document also links a proposal to reading its call."""

    def get_openapi_schema(
        self, *, path_prefix: str | None = None, path_params: JSONObject | None = None
    ) -> OpenAPISchema:
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        for path, operations in schema["paths"].items():
            if path.endswith("/tool-calls") and "post" in operations:
                for code in (200, 201, 202):
                    operations["post"]["responses"][code]["links"] = {"ReadCall": READ_CALL_LINK}
        return schema


api = GatehouseApi(
    title="Gatehouse agent API",
    version="1",
    description="Propose tool calls; Gatehouse validates, classifies, holds for approval and executes them.",
    auth=AgentBearer(),
    parser=StrictJsonParser(),
    urls_namespace="agent-api",
    openapi_url="/openapi.json",
    docs_url=None,
)


class FieldProblem(Schema):
    field: str
    problem: str
    accepted_values: list[JSONValue] | None = None


class ErrorOut(Schema):
    model_config = ConfigDict(extra="allow")

    error: str = Field(description="A stable machine-readable code: " + ", ".join(sorted(ERROR_STATUS)))
    message: str
    errors: list[FieldProblem] | None = None


class CallOut(Schema):
    id: str
    tool: str
    status: str
    risk_tier: int | None
    risk_reasons: list[JSONObject]
    approvals_required: int
    idempotency_key: str | None
    arguments: JSONObject
    conversation_id: str | None
    step: int | None
    call_index: int | None
    result: JSONValue = None
    error: JSONObject | None = None
    preview: JSONObject | None = None
    created_at: str
    decided_at: str | None
    expires_at: str | None
    finished_at: str | None


class PreviewOut(Schema):
    dry_run: bool
    tool: str
    risk_tier: int
    risk_reasons: list[JSONObject]
    would_require_approval: bool
    preview: JSONObject


class ToolOut(Schema):
    model_config = ConfigDict(extra="allow")

    name: str
    title: str
    description: str
    inputSchema: JSONObject
    annotations: JSONObject


class ToolsOut(Schema):
    tools: list[ToolOut]


class WaitQuery(Schema):
    wait: float = Field(0, ge=0, le=60, description="Seconds to wait for the call to settle (capped by the server).")


def _errors(*codes: str) -> dict[int, type[ErrorOut]]:
    return {ERROR_STATUS[code]: ErrorOut for code in codes}


COMMON_ERRORS = ("unauthorized", "malformed_request", "payload_too_large", "rate_limited", "service_unavailable")


@api.exception_handler(ApiError)
def _api_error(request: HttpRequest, exc: ApiError) -> HttpResponse:
    return error_response(exc)


@api.exception_handler(OperationalError)
@api.exception_handler(InterfaceError)
def _database_unavailable(request: HttpRequest, exc: Exception) -> HttpResponse:
    log.warning("database unavailable during %s %s: %s", request.method, request.path, exc)
    return database_unavailable(request)


@api.exception_handler(AuthenticationError)
def _unauthorized(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    response = error_response(ApiError("unauthorized", "Send a valid agent token as 'Authorization: Bearer <token>'."))
    response["WWW-Authenticate"] = 'Bearer realm="gatehouse"'
    return response


@api.exception_handler(ValidationError)
def _invalid_envelope(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    problems = []
    for item in exc.errors:
        loc = [str(part) for part in item.get("loc", ()) if part not in ("body", "payload", "query", "path")]
        problems.append({"field": ".".join(loc) or "body", "problem": item.get("msg", "is invalid")})
    return error_response(
        ApiError("malformed_request", "The request does not match the API's request schema.", errors=problems)
    )


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    if isinstance(exc.__cause__, ApiError):  # raised by StrictJsonParser, wrapped by ninja
        return error_response(exc.__cause__)
    if exc.status_code == 400:
        return error_response(ApiError("malformed_request", "The request body is not valid JSON."))
    return error_response(ApiError("malformed_request", str(exc)))


def _json(body: JSONObject, status: int, replayed: bool = False) -> JsonResponse:
    response = JsonResponse(body, status=status, json_dumps_params={"ensure_ascii": False})
    if replayed:
        response["Idempotent-Replayed"] = "true"
    return response


@api.get(
    "/tools",
    response={200: ToolsOut, **_errors(*COMMON_ERRORS)},
    summary="List the tools this agent may use",
    operation_id="listTools",
)
def list_tools(request: AgentRequest) -> HttpResponse:
    tools = Tool.objects.filter(grants__agent=request.agent, enabled=True).order_by("name")
    return _json({"tools": [tool_body(tool) for tool in tools]}, 200)


@api.post(
    "/tool-calls",
    auth=AgentBearer(with_proposed_grant=True),
    response={
        200: CallOut | PreviewOut,
        201: CallOut,
        202: CallOut,
        **_errors(
            *COMMON_ERRORS,
            "unknown_or_not_permitted_tool",
            "invalid_arguments",
            "permission_denied",
            "idempotency_conflict",
            "circuit_open",
        ),
    },
    summary="Propose a tool call",
    operation_id="proposeToolCall",
    description="201: accepted and approved; 202: held for a reviewer; 200: a replay of an earlier "
    "call with the same idempotency key (header Idempotent-Replayed: true), or a dry-run preview.",
)
def create_call(request: AgentRequest, payload: ProposalIn, query: Query[WaitQuery]) -> HttpResponse:
    with telemetry.ProposalScope(request.headers, tool=payload.tool, conversation_id=payload.conversation_id) as scope:
        outcome = propose(request.agent, Proposal(**payload.model_dump()), request.read_grant)
        if outcome.call is not None:
            scope.called(outcome.call.pk, outcome.call.status, outcome.call.risk_tier)
    if outcome.preview is not None and outcome.verdict is not None:
        return _json(
            {
                "dry_run": True,
                "tool": payload.tool,
                "risk_tier": outcome.verdict.risk_tier,
                "risk_reasons": outcome.verdict.risk_reasons,
                "would_require_approval": outcome.verdict.outcome == "pending_approval",
                "preview": outcome.preview,
            },
            200,
        )
    call = outcome.call
    assert call is not None
    body = wait_for(call, query.wait) if query.wait else call_body(call)
    if outcome.replayed:
        return _json(body, 200, replayed=True)
    return _json(body, 202 if body["status"] == "pending_approval" else 201)


@api.get(
    "/tool-calls/{call_id}",
    response={200: CallOut, **_errors(*COMMON_ERRORS, "not_found")},
    summary="Read one of this agent's calls",
    operation_id="readToolCall",
)
def read_call(request: AgentRequest, call_id: str, query: Query[WaitQuery]) -> HttpResponse:
    call = get_agent_call(request.agent, call_id)
    body = wait_for(call, query.wait, until_changed_from=call.status) if query.wait else call_body(call)
    return _json(body, 200)
