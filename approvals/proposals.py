"""One proposal, REST and MCP alike: resolve the grant, decide, store with its audit event.

`propose()` turns one proposal into a stored ToolCall (or a refusal); the decision
itself is the pure `toolcatalog.policy.evaluate()`, the storing `approvals.lifecycle`.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, NoReturn

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone
from ninja import Field, Schema
from pydantic import BeforeValidator, ConfigDict

from agents import ratelimit
from agents.breakers import record_success
from agents.budgets import Budget, BudgetExhausted, budgets_for, exhausted
from agents.grants import ReadGrant, find_grant
from agents.models import Agent, BudgetScope, Grant
from approvals import execution, lifecycle, limits, sensitive, standing, telemetry
from approvals.errors import ApiError
from approvals.jsonbody import nul_fields
from approvals.models import StandingApproval, ToolCall
from approvals.states import Status
from audit.canonical import canonical_hash, inexact_numbers, normalized
from audit.chain import record_alone
from audit.models import ActorKind
from audit.typealiases import JSONObject, JSONValue
from toolcatalog.policies import policy_for
from toolcatalog.policy import Outcome, ToolPolicy, Verdict, evaluate

HEX32 = re.compile(r"^[a-f0-9]{32}$")


# ------------------------------------------------------------------ the envelope (REST and MCP)


def _json_integer(value: JSONValue) -> JSONValue:
    """Accept what JSON Schema calls an integer (3 and 3.0), nothing else (not "3", not true)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# Constraints before the validator: in the other order pydantic documents them wrongly.
StepNumber = Annotated[int, Field(ge=0, le=2**31 - 1), BeforeValidator(_json_integer)]
# Text columns cannot hold NUL; saying so in the schema tells clients up front.
NO_NUL = r"^[^\x00]*$"


class ProposalIn(Schema):
    model_config = ConfigDict(extra="forbid", strict=True)

    tool: str = Field(
        min_length=1, max_length=100, pattern=NO_NUL, description="The tool's name, as GET /tools lists it."
    )
    arguments: JSONObject = Field(description="The tool's arguments; must match its inputSchema.")
    idempotency_key: str | None = Field(None, min_length=1, max_length=255, pattern=NO_NUL)
    conversation_id: str | None = Field(None, min_length=1, max_length=200, pattern=NO_NUL)
    step: StepNumber | None = None
    call_index: StepNumber | None = None
    justification: str = Field("", max_length=10_000, pattern=NO_NUL)
    dry_run: bool = Field(False, description="Return a preview of the effect; store and execute nothing.")


def enforce_rate_limit(agent: Agent) -> None:
    """Raise `rate_limited` (429, Retry-After) when the agent is over its per-minute limit."""
    decision = ratelimit.hit(agent.pk)
    if not decision.allowed:
        error = ApiError(
            "rate_limited",
            f"Too many requests: slow down and retry after {decision.retry_after} s.",
            retry_after=decision.retry_after,
        )
        error.headers["Retry-After"] = str(decision.retry_after)
        raise error


def get_agent_call(agent: Agent, call_id: str) -> ToolCall:
    """Return one of this agent's calls; anything else is not found."""
    try:
        pk = uuid.UUID(call_id)
    except ValueError:
        pk = None
    call = ToolCall.objects.select_related("tool").filter(pk=pk, agent=agent).first() if pk else None
    if call is None:
        raise ApiError("not_found", "No call with that id belongs to this agent.")
    return call


# ------------------------------------------------------------------ one proposal


@dataclass
class Proposal:
    tool: str
    arguments: JSONObject
    idempotency_key: str | None = None
    conversation_id: str | None = None
    step: int | None = None
    call_index: int | None = None
    justification: str = ""
    dry_run: bool = False
    # The person an OAuth token acts for (set by the MCP endpoint from the token, never from the body).
    on_behalf_of: User | None = None


@dataclass
class Proposed:
    """What happened to a proposal: the call, whether it was a replay, or a preview."""

    call: ToolCall | None = None
    replayed: bool = False
    preview: JSONObject | None = None
    verdict: Verdict | None = None


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def derive_key(conversation_id: str, step: int, call_index: int) -> str:
    """Return the idempotency key of one logical attempt: the same (conversation, step, call) → the same key."""
    return sha256_hex(f"{conversation_id}:{step}:{call_index}")[:32]


def resolve_key(proposal: Proposal) -> str | None:
    """Return the call's idempotency key: given, derived from conversation/step/call, or None."""
    if proposal.idempotency_key:
        return proposal.idempotency_key
    if proposal.conversation_id and proposal.step is not None and proposal.call_index is not None:
        return derive_key(proposal.conversation_id, proposal.step, proposal.call_index)
    arg_key = proposal.arguments.get("idempotency_key") if isinstance(proposal.arguments, dict) else None
    return arg_key if isinstance(arg_key, str) and arg_key else None


def argument_key(key: str) -> str:
    """Return `key` in the 32-lowercase-hex form tools' own `idempotency_key` arguments take."""
    return key if HEX32.match(key) else sha256_hex(key)[:32]


def fill_tool_key(grant: Grant, arguments: JSONObject, key: str | None) -> JSONObject:
    """Fill the tool's own `idempotency_key` argument from the call's key, or check they agree."""
    if key is None or not grant.tool.takes_idempotency_key() or not isinstance(arguments, dict):
        return arguments
    given = arguments.get("idempotency_key")
    if given is None:
        return {**arguments, "idempotency_key": argument_key(key)}
    if given not in (key, argument_key(key)):
        raise ApiError(
            "invalid_arguments",
            "arguments.idempotency_key and the request's idempotency key disagree: send one, or the same in both.",
            errors=[{"field": "idempotency_key", "problem": "must equal the request's idempotency key"}],
        )
    return arguments


def resolve_grant(agent: Agent, tool_name: str, read: ReadGrant | None = None) -> Grant:
    """Return the agent's grant for an enabled tool, or refuse without revealing whether it exists.

    The grant comes annotated with its circuit breaker's state, and (read with the
    agent on PostgreSQL) with the current risk tiers as `tier_specs`. `read`: the
    grant already read with the agent, if it was for this tool
    (`approvals.store.authenticate_with_grant`).
    """
    grant = read.grant if read is not None and read.tool_name == tool_name else find_grant(agent, tool_name)
    if grant is None:
        record_alone(
            "call.refused",
            actor=(ActorKind.AGENT, agent.name),
            agent_name=agent.name,
            tool_name=tool_name[:100],
            data={"error": "unknown_or_not_permitted_tool"},
        )
        # The same body whether the tool does not exist or is not granted: existence is not revealed.
        raise ApiError(
            "unknown_or_not_permitted_tool",
            "No tool by that name is available to this agent. "
            "List the tools it may use (GET /api/v1/tools, or tools/list over MCP).",
        )
    return grant


def gate_error(agent: Agent, grant: Grant, proposal: Proposal) -> ApiError | None:
    """Return the refusal of an open circuit breaker, if any (budgets are spent as the call is stored)."""
    if grant.breaker_open:
        return ApiError(
            "circuit_open",
            f"Too many consecutive failed calls of '{grant.tool.name}': a reviewer must reset this "
            "agent's circuit breaker before it may call the tool again.",
        )
    return None


def budget_error(spent_out: BudgetExhausted) -> ApiError:
    """Return the refusal of an exhausted budget: which one, its limit and, for the agent's window, when it refills."""
    budget = spent_out.budget
    if budget.scope == BudgetScope.CONVERSATION:
        return ApiError(
            "budget_exhausted",
            f"This conversation has used its budget of {budget.limit} tool calls. Finish, or hand over to a person.",
            budget=budget.limit,
            scope="conversation",
        )
    error = ApiError(
        "budget_exhausted",
        f"This agent has used its budget of {budget.limit} tool calls for now, in any conversation. "
        f"Try again in {spent_out.retry_after} s, or hand over to a person.",
        budget=budget.limit,
        scope="agent",
        retry_after=spent_out.retry_after,
    )
    error.headers["Retry-After"] = str(spent_out.retry_after)
    return error


def _refuse_gate(agent: Agent, grant: Grant, error: ApiError) -> NoReturn:
    record_alone(
        "call.refused",
        actor=(ActorKind.AGENT, agent.name),
        agent_name=agent.name,
        tool_name=grant.tool.name,
        data={"error": error.code},
    )
    raise error


def refuse_unstorable(arguments: JSONObject) -> None:
    """Refuse arguments holding NUL characters: valid JSON, but no database stores them."""
    paths = nul_fields(arguments)
    if paths:
        raise ApiError(
            "invalid_arguments",
            "Some strings in the arguments contain the NUL character (\\u0000), which is not accepted.",
            errors=[{"field": path or "arguments", "problem": "must not contain the NUL character"} for path in paths],
        )


def intake_arguments(arguments: JSONValue) -> JSONValue:
    """Return the arguments in their canonical form (100.0 → 100), the one hashed, stored and run.

    Refuses an integer no double holds exactly (beyond ±2**53 − 1, e.g. 9007199254740993):
    RFC 8785, and any I-JSON reader downstream, would take it as a neighbouring number.
    """
    paths = inexact_numbers(arguments)
    if paths:
        raise ApiError(
            "invalid_arguments",
            "Some integers in the arguments are more precise than a JSON number (an IEEE double) "
            "can be: send such values as strings.",
            errors=[{"field": path or "arguments", "problem": "must be a number JSON holds exactly"} for path in paths],
        )
    return normalized(arguments)


def propose(agent: Agent, proposal: Proposal, read: ReadGrant | None = None) -> Proposed:
    """Run one proposal through the pipeline; raise ApiError for a refusal (`read`: see `resolve_grant`)."""
    grant = resolve_grant(agent, proposal.tool, read)
    refuse_unstorable(proposal.arguments)
    key = resolve_key(proposal)
    arguments = fill_tool_key(grant, intake_arguments(proposal.arguments), key)
    # Sensitive values are hashed as stored, by their keyed hash: a replay must send the same values.
    request_hash = canonical_hash({"tool": grant.tool.name, "arguments": sensitive.redacted(grant.tool, arguments)})
    # A refusal does not bind the key (as Stripe does for requests that fail
    # validation), but a key that already belongs to an accepted call still wins.
    refused_error = gate_error(agent, grant, proposal)
    if refused_error is not None:
        return _replay_existing(agent, key, request_hash) or _refuse_gate(agent, grant, refused_error)
    policy = policy_for(grant.tool, getattr(grant, "tier_specs", None))
    verdict = evaluate(policy, grant, arguments)
    if not verdict.refused and verdict.risk_tier and key is None:
        raise ApiError(
            "malformed_request",
            f"Calls at risk tier {verdict.risk_tier} need an idempotency_key "
            "(or conversation_id, step and call_index to derive one).",
        )
    if proposal.dry_run:
        if policy.cumulative and not verdict.refused:  # the windows as they stand: a read, not a decision
            verdict = evaluate(policy, grant, arguments, limits.usage_now(policy, grant.tool, agent, arguments))
        return _dry_run(agent, grant, arguments, verdict, proposal.conversation_id or "")
    if verdict.refused:
        return _replay_existing(agent, key, request_hash) or _refuse(agent, grant, proposal, arguments, verdict)
    return _accept(
        agent, grant, proposal, arguments, verdict, key, request_hash, _judge(policy, grant, arguments, verdict)
    )


def _replay_existing(agent: Agent, key: str | None, request_hash: str) -> Proposed | None:
    """Return a replay of the accepted call holding `key`, if there is one."""
    existing = ToolCall.objects.select_related("tool").filter(agent=agent, idempotency_key=key).first() if key else None
    return _replay(existing, request_hash) if existing is not None else None


@dataclass(frozen=True)
class Judge:
    """A proposal judged again as it is stored: under cumulative limits, or where a standing approval may cover it."""

    policy: ToolPolicy
    grant: Grant
    arguments: JSONObject  # the real values (stored ones may be redacted)
    verdict: Verdict  # the verdict without the limits' windows

    def decide(self, call: ToolCall, now: datetime) -> tuple[Verdict, StandingApproval | None]:
        """Inside the storing transaction: judge with the windows' totals (locked), then take a standing approval."""
        verdict = self.verdict
        if self.policy.cumulative:
            verdict = limits.judge(
                self.policy, self.grant, call.agent, self.arguments, call.arguments, call.tool_id, now
            )
        used = standing.use(call, verdict, self.arguments, now) if standing.covers(verdict) else None
        return (verdict, None) if used is None else (standing.approved_by(verdict, used), used)


def _judge(policy: ToolPolicy, grant: Grant, arguments: JSONObject, verdict: Verdict) -> Judge | None:
    """Return how to judge the proposal again as it is stored, or None: the verdict stands (one-message path)."""
    if policy.cumulative:
        return Judge(policy, grant, arguments, verdict)
    if standing.covers(verdict) and _standing_possible(grant):
        return Judge(policy, grant, arguments, verdict)
    return None


def _standing_possible(grant: Grant) -> bool:
    """Return whether a standing approval could cover the agent's call of this tool (read with the grant on
    PostgreSQL, `approvals.store.authenticate_with_grant`; otherwise asked here)."""
    possible = getattr(grant, "standing_possible", None)
    if possible is None:
        return standing.may_cover(grant.agent_id, grant.tool, timezone.now())
    return bool(possible)


def _accept(
    agent: Agent,
    grant: Grant,
    proposal: Proposal,
    arguments: JSONObject,
    verdict: Verdict,
    key: str | None,
    request_hash: str,
    judge: Judge | None = None,
) -> Proposed:
    """Store an accepted proposal (approved or pending); a duplicate key becomes a replay.

    `judge`: the tool has cumulative limits, so the verdict is taken again as the call is stored.
    """
    call = _new_call(
        agent,
        grant,
        proposal,
        verdict,
        arguments,
        status=verdict.outcome,
        request_hash=request_hash,
        idempotency_key=key,
        approvals_required=verdict.approvals_required,
    )
    try:
        existing = _insert(call, verdict, judge)
    except limits.Refused as raised:  # a limit raised it above the grant: refused, outside the rolled-back work
        return _replay_existing(agent, key, request_hash) or _refuse(agent, grant, proposal, arguments, raised.verdict)
    except BudgetExhausted as spent_out:
        # Nothing was stored or spent; a key that already belongs to an accepted call still wins.
        return _replay_existing(agent, key, request_hash) or _refuse_gate(agent, grant, budget_error(spent_out))
    if existing is not None:
        return _replay(existing, request_hash)
    if grant.breaker_failures:
        record_success(agent_id=agent.pk, tool_id=grant.tool_id)
    return Proposed(call=call, verdict=verdict)


def _insert(call: ToolCall, verdict: Verdict, judge: Judge | None = None) -> ToolCall | None:
    """Insert the call with its audit event, spending its budgets; return the existing call if the key is taken.

    The unique constraint on (agent, idempotency_key) decides between concurrent
    duplicates: the loser's insert fails and it reads the winner's row. Budgets
    are spent in the same transaction, so a loser (a replay) spends nothing, and
    BudgetExhausted leaves nothing stored. With a `judge` (cumulative limits, or a
    standing approval that may cover it) the call is judged again and stored in one
    transaction holding its windows' locks and its standing approval's use (so the
    store's portable path); limits.Refused leaves nothing stored.
    """
    now = timezone.now()
    budgets = budgets_for(call.agent, call.conversation_id, now)
    try:
        if judge is None:
            _store(call, verdict, budgets, now)
        else:
            _store_judged(call, judge, budgets, now)
    except IntegrityError:
        if call.idempotency_key is None:
            raise
        return ToolCall.objects.select_related("tool", "agent").get(
            agent=call.agent, idempotency_key=call.idempotency_key
        )
    return None


def _store_judged(call: ToolCall, judge: Judge, budgets: list[Budget], now: datetime) -> None:
    """Judge the call again and store it in one transaction: the limits' locks and a standing approval's use
    commit (or roll back) with the call."""
    with transaction.atomic():
        verdict, used = judge.decide(call, now)
        _store(call, verdict, budgets, now)
        if used is not None:
            standing.record_use(call, used)


def _store(call: ToolCall, verdict: Verdict, budgets: list[Budget], now: datetime) -> None:
    """Stamp the call with `verdict` and store it (lifecycle.propose); a refusal raises limits.Refused."""
    if verdict.refused:
        raise limits.Refused(verdict)
    call.status, call.risk_tier, call.risk_reasons = verdict.outcome, verdict.risk_tier, verdict.risk_reasons
    call.approvals_required = verdict.approvals_required
    call.created_at = now
    if verdict.outcome == Outcome.PENDING_APPROVAL and verdict.approval_window is not None:
        call.expires_at = now + verdict.approval_window
    if verdict.outcome == Outcome.APPROVED:
        call.decided_at = now
        call.approved_arguments_hash = call.arguments_hash
        call.approved_tool_version = call.tool_version
    lifecycle.propose(call, budgets, now)


def _replay(existing: ToolCall, request_hash: str) -> Proposed:
    if existing.request_hash != request_hash:
        raise ApiError(
            "idempotency_conflict",
            "This idempotency key was already used for a different tool or different arguments. "
            "Use a new key for a new call.",
            call_id=str(existing.pk),
        )
    lifecycle.record_replay(existing)
    return Proposed(call=existing, replayed=True)


def _new_call(
    agent: Agent,
    grant: Grant,
    proposal: Proposal,
    verdict: Verdict,
    arguments: JSONValue,
    **fields: object,
) -> ToolCall:
    """Return an unsaved call for `proposal` as the pipeline judged it; `fields` say how it was decided.

    Its arguments are stored redacted (sensitive values as their keyed hashes); the values
    themselves ride along as `sensitive_values`, for the vault (approvals.sensitive).
    """
    stored, values = sensitive.split(grant.tool, arguments) if isinstance(arguments, dict) else (arguments, {})
    call = ToolCall(
        agent=agent,
        tool=grant.tool,
        tool_version=grant.tool.version,
        # A refused proposal may not even be an object; the row keeps it as sent.
        arguments=stored if isinstance(stored, dict) else {"_": stored},
        arguments_hash=canonical_hash(stored),
        conversation_id=proposal.conversation_id or "",
        step=proposal.step,
        call_index=proposal.call_index,
        justification=proposal.justification,
        risk_tier=verdict.risk_tier,
        risk_reasons=verdict.risk_reasons,
        on_behalf_of=proposal.on_behalf_of,
        **telemetry.proposal_trace(),
        **fields,
    )
    call.sensitive_values = values
    return call


def _refuse(agent: Agent, grant: Grant, proposal: Proposal, arguments: JSONValue, verdict: Verdict) -> NoReturn:
    """Store and audit a refused proposal (without its key), count it for the breaker, raise its error."""
    error = ApiError.from_verdict(verdict)
    call = _new_call(
        agent,
        grant,
        proposal,
        verdict,
        arguments,
        status=Status.REFUSED,
        error=error.body(),
        finished_at=timezone.now(),
    )
    lifecycle.refuse_proposal(call, error.code)
    error.details["call_id"] = str(call.pk)
    raise error


def _dry_run(agent: Agent, grant: Grant, arguments: JSONObject, verdict: Verdict, conversation_id: str) -> Proposed:
    """Predict the call's effect without storing, executing or spending anything."""
    if verdict.refused:
        raise ApiError.from_verdict(verdict)
    spent_out = exhausted(agent, conversation_id, timezone.now())
    if spent_out is not None:
        raise budget_error(spent_out)
    preview = execution.preview_arguments(grant.tool, agent, arguments)
    return Proposed(preview=preview, verdict=verdict)
