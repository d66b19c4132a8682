"""Gatehouse as an MCP server: `tools/list` and `tools/call` for the agent holding the token.

The handlers are adapters only. Listing shows the agent's granted, enabled tools
(MCP shape from `approvals.serializers.tool_body`); calling builds a `Proposal`
through the envelope schema REST uses too (`approvals.proposals.ProposalIn`) and
hands it to `approvals.proposals.propose`, then reads the call back with
`approvals.watch.wait_for` and `approvals.proposals.get_agent_call`. ORM work runs in a worker thread
(`sync_to_async`), never on the event loop. A held call goes back as a task to clients
that declare the Tasks extension (`approvals.mcp.tasks`).

Idempotency and conversation data travel in the request's `_meta`, not in the
tool's arguments (which stay exactly the tool's schema):
`gatehouse/idempotency_key`, `gatehouse/conversation_id`, `gatehouse/step`,
`gatehouse/call_index`, `gatehouse/justification`, `gatehouse/wait_seconds`.
"""

from __future__ import annotations

import logging

import mcp.types as types
from django.conf import settings
from mcp.server import Server, ServerRequestContext
from pydantic import ValidationError
from starlette.requests import Request

from agents.models import Agent
from approvals import telemetry
from approvals.errors import ApiError
from approvals.mcp import tasks
from approvals.mcp.catalog import CatalogChanges
from approvals.mcp.identity import orm_work, request_agent, request_person
from approvals.mcp.results import META_PREFIX, STATUS_TOOL, call_envelope_schema, call_result, error_result
from approvals.proposals import Proposal, ProposalIn, get_agent_call, propose
from approvals.serializers import call_body, tool_body
from approvals.watch import wait_for
from audit.typealiases import JSONObject, JSONValue
from toolcatalog.models import Tool
from toolcatalog.schema import argument_errors, compile_validator

log = logging.getLogger(__name__)

ENVELOPE_FIELDS = ("idempotency_key", "conversation_id", "step", "call_index", "justification")
WAIT_KEY = META_PREFIX + "wait_seconds"
UNAVAILABLE = ApiError(
    "service_unavailable",
    "Gatehouse could not process this call right now. Retrying with the same idempotency key is safe.",
)

INSTRUCTIONS = (
    "Gatehouse governs every tool call: it validates the arguments, classifies the risk, holds risky calls "
    "for a human reviewer and runs approved calls for you. Errors come back as tool results with isError "
    "and a JSON body {error, message, errors?}: read it and fix the call. A call waiting for a reviewer comes "
    f"back with status 'pending_approval' and its id: follow it with {STATUS_TOOL}. Writes need an idempotency "
    "key: send _meta {'gatehouse/idempotency_key': ...} or 'gatehouse/conversation_id' + 'gatehouse/step' + "
    "'gatehouse/call_index', so a retry never runs twice."
)

STATUS_SCHEMA: JSONObject = {
    "type": "object",
    "properties": {
        "call_id": {"type": "string", "minLength": 1, "maxLength": 64, "description": "The id a tools/call returned."},
        "wait_seconds": {
            "type": "number",
            "minimum": 0,
            "maximum": 60,
            "description": "Wait up to this long for the status to change (0: answer at once).",
        },
    },
    "required": ["call_id"],
    "additionalProperties": False,
}
_status_validator = compile_validator(STATUS_SCHEMA)

STATUS_TOOL_SPEC = types.Tool(
    name=STATUS_TOOL,
    title="Get a call's status",
    description="Return the current state of one of your earlier tool calls, by the call id a tools/call "
    "returned: pending_approval (a reviewer has not decided yet), approved/executing (running), succeeded "
    "(with its result), rejected (with the reviewer's reason), expired or failed. With wait_seconds it waits "
    "for the status to change. Reading a status never runs anything.",
    input_schema=STATUS_SCHEMA,
    output_schema=call_envelope_schema(),
    annotations=types.ToolAnnotations(
        title="Get a call's status",
        read_only_hint=True,
        destructive_hint=False,
        idempotent_hint=True,
        open_world_hint=False,
    ),
)


def mcp_tool(tool: Tool) -> types.Tool:
    """Return a catalog tool in MCP shape; its own outputSchema is advertised inside the call envelope."""
    body = tool_body(tool)
    if body.get("outputSchema"):
        body["outputSchema"] = call_envelope_schema(body["outputSchema"])
    return types.Tool.model_validate(body)


def visible_tools(agent: Agent) -> list[types.Tool]:
    """Return the tools this agent may see: its granted, enabled tools, then the status tool."""
    tools = Tool.objects.filter(grants__agent=agent, enabled=True).exclude(name=STATUS_TOOL).order_by("name")
    return [*(mcp_tool(tool) for tool in tools), STATUS_TOOL_SPEC]


def proposal_from(params: types.CallToolRequestParams) -> tuple[Proposal, float]:
    """Return the proposal a tools/call makes and how long to wait for it, or raise `malformed_request`.

    The envelope is validated by the request schema REST uses too, so both APIs
    accept exactly the same values.
    """
    meta = dict(params.meta or {})
    ours = {key.removeprefix(META_PREFIX): value for key, value in meta.items() if key.startswith(META_PREFIX)}
    unknown = sorted(set(ours) - {*ENVELOPE_FIELDS, "wait_seconds"})
    if unknown:
        raise ApiError(
            "malformed_request",
            "Unknown Gatehouse _meta keys.",
            errors=[
                {
                    "field": f"_meta.{META_PREFIX}{name}",
                    "problem": "is not an accepted key",
                    "accepted_values": [META_PREFIX + field for field in (*ENVELOPE_FIELDS, "wait_seconds")],
                }
                for name in unknown
            ],
        )
    wait = _wait_seconds(ours.get("wait_seconds", settings.GATEHOUSE_MCP_WAIT_SECONDS), WAIT_KEY)
    envelope = {field: ours[field] for field in ENVELOPE_FIELDS if field in ours}
    try:
        payload = ProposalIn.model_validate({"tool": params.name, "arguments": params.arguments or {}, **envelope})
    except ValidationError as exc:
        raise ApiError(
            "malformed_request",
            "The call's _meta does not match what Gatehouse accepts.",
            errors=[_envelope_problem(item) for item in exc.errors()],
        ) from None
    return Proposal(**payload.model_dump()), wait


def _envelope_problem(item: JSONValue) -> dict[str, str]:
    name = ".".join(str(part) for part in item.get("loc", ())) or "params"
    field = f"_meta.{META_PREFIX}{name}" if name in ENVELOPE_FIELDS else name
    return {"field": field, "problem": item.get("msg", "is invalid")}


def _wait_seconds(value: JSONValue, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 60:
        raise ApiError(
            "malformed_request",
            "wait_seconds must be a number of seconds from 0 to 60.",
            errors=[{"field": field, "problem": "must be a number from 0 to 60"}],
        )
    return float(value)


def propose_and_wait(agent: Agent, proposal: Proposal, wait: float) -> tuple[JSONObject, bool]:
    """Run the proposal through the pipeline, wait briefly for it to settle; return (call body, replayed)."""
    # The MCP SDK's `tools/call` span, parented by the request's `_meta` traceparent, is the current one here.
    with telemetry.ProposalScope(None, tool=proposal.tool, conversation_id=proposal.conversation_id) as scope:
        outcome = propose(agent, proposal)
        call = outcome.call
        assert call is not None  # dry runs are not offered over MCP
        scope.called(call.pk, call.status, call.risk_tier)
    return (wait_for(call, wait) if wait else call_body(call)), outcome.replayed


def call_status(agent: Agent, arguments: JSONObject) -> JSONObject:
    """Return one of this agent's calls (waiting for a change if asked); other agents' calls are not found."""
    problems = argument_errors(_status_validator, arguments)
    if problems:
        raise ApiError("invalid_arguments", f"The arguments of '{STATUS_TOOL}' are invalid.", errors=problems)
    call = get_agent_call(agent, arguments["call_id"])
    wait = float(arguments.get("wait_seconds", 0))
    return wait_for(call, wait, until_changed_from=call.status) if wait else call_body(call)


async def call_tool(
    ctx: ServerRequestContext[JSONObject, Request], params: types.CallToolRequestParams
) -> types.CallToolResult:
    """Serve tools/call: every outcome, refusals included, is a tool result the model can read."""
    agent = request_agent(ctx)
    try:
        if params.name == STATUS_TOOL:
            return call_result(await orm_work(call_status)(agent, params.arguments or {}))
        proposal, wait = proposal_from(params)
        proposal.on_behalf_of = request_person(ctx)
        body, replayed = await orm_work(propose_and_wait)(agent, proposal, wait)
    except ApiError as error:
        return error_result(error)
    except Exception:  # a bug or an outage must not leak internals to the model
        log.exception("tools/call %s failed inside Gatehouse", params.name[:100])
        return error_result(UNAVAILABLE)
    return call_result(body, replayed=replayed)


async def list_tools(
    ctx: ServerRequestContext[JSONObject, Request], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    """Serve tools/list: only what this agent was granted (a tool it cannot see, it cannot misuse)."""
    agent = request_agent(ctx)
    return types.ListToolsResult(tools=await orm_work(visible_tools)(agent))


def build_server() -> Server[JSONObject]:
    """Return the low-level MCP server (tools are per agent, so no static registry)."""
    changes = CatalogChanges()
    server: Server[JSONObject] = Server(
        "gatehouse",
        version="1",
        title="Gatehouse",
        description="Human-in-the-loop approval for AI-agent tool calls.",
        instructions=INSTRUCTIONS,
        lifespan=changes.lifespan,
        on_list_tools=list_tools,
        on_subscriptions_listen=changes.listen,
    )
    tasks.install(server, call_tool)  # tools/call, with held calls as tasks for clients that declare them
    return server
