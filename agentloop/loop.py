"""The agent loop of seed 004, with Gatehouse as the only way to act.

Per step: call the model (with the tools this agent may use); if it asks for
tools, run them — all calls of one step in parallel, each through Gatehouse with
an idempotency key derived from (conversation, step, call) — and append every
result, errors included, as data the model reads next. Stop on an answer or
when a budget (steps, tokens, wall time) runs out.

Reversible first, then compensation: every succeeded call that has an inverse
(hold_seats → release_hold) goes on a saga log; if the run does not complete —
the model abandons the task after a later step failed, or a budget runs out —
the loop undoes the log in reverse order, again through Gatehouse.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import mcp.types as types

from agentloop.jsontypes import JSONObject
from agentloop.mcp_client import SETTLED, STATUS_TOOL, Gatehouse, ToolOutcome, error_outcome
from agentloop.models import Message, Model, ModelTurn, ToolRequest

ABANDON_TOOL = "abandon_task"
SYSTEM_PROMPT = (
    "You act for a user through tools governed by Gatehouse. Use only the tools offered. Tool errors come back "
    "as JSON {error, message, errors?}: read them and fix your call, or choose another way. A call waiting for "
    f"a human reviewer has status 'pending_approval': follow it with {STATUS_TOOL}. If the task cannot be "
    f"completed, call {ABANDON_TOOL} with the reason: anything you reserved is then released for you."
)
ABANDON_SPEC: JSONObject = {
    "type": "function",
    "function": {
        "name": ABANDON_TOOL,
        "description": "Give up on the task (say why). Reversible actions already taken are undone.",
        "parameters": {
            "type": "object",
            "properties": {"reason": {"type": "string"}},
            "required": ["reason"],
            "additionalProperties": False,
        },
    },
}


@dataclass(frozen=True)
class Budgets:
    """Limits on one run: model calls, tokens (input + output) and wall-clock seconds."""

    max_steps: int = 8
    max_tokens: int = 40_000
    max_seconds: float = 120.0


@dataclass(frozen=True)
class Compensation:
    """The inverse of a reversible tool: which tool undoes it, with what arguments (from its result)."""

    tool: str
    arguments: Callable[[JSONObject], JSONObject]


COMPENSATIONS: dict[str, Compensation] = {
    "hold_seats": Compensation("release_hold", lambda result: {"hold_id": result["hold_id"]}),
}


@dataclass
class RunResult:
    """How a run ended, what it cost, and every call it made."""

    conversation_id: str
    status: str  # completed | abandoned | budget_exhausted | model_error
    answer: str
    stop_reason: str = ""
    steps: int = 0
    tokens: int = 0
    seconds: float = 0.0
    calls: list[ToolOutcome] = field(default_factory=list)
    compensations: list[ToolOutcome] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)


def tool_spec(tool: types.Tool) -> JSONObject:
    """Return an MCP tool as an OpenAI function spec, without `idempotency_key`: the loop owns keys."""
    schema = dict(tool.input_schema)
    properties = {k: v for k, v in (schema.get("properties") or {}).items() if k != "idempotency_key"}
    schema["properties"] = properties
    if "required" in schema:
        schema["required"] = [name for name in schema["required"] if name != "idempotency_key"]
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description or "", "parameters": schema},
    }


@dataclass
class Saga:
    """The log of reversible effects this run produced, and how to undo them."""

    compensations: dict[str, Compensation]
    done: list[tuple[Compensation, ToolOutcome]] = field(default_factory=list)

    def record(self, outcome: ToolOutcome, arguments: JSONObject) -> None:
        """Log a succeeded reversible call; forget one the model already undid itself."""
        if outcome.status != "succeeded":
            return
        compensation = self.compensations.get(outcome.tool)
        if compensation is not None and isinstance(outcome.result, dict):
            self.done.append((compensation, outcome))
        self.done = [
            (comp, forward)
            for comp, forward in self.done
            if not (comp.tool == outcome.tool and comp.arguments(forward.result) == arguments)
        ]


class AgentLoop:
    """Runs one task for one agent: a model, a Gatehouse session and budgets."""

    def __init__(
        self,
        model: Model,
        gatehouse: Gatehouse,
        *,
        budgets: Budgets | None = None,
        compensations: dict[str, Compensation] | None = None,
        approval_wait_seconds: float = 0.0,
        system_prompt: str = SYSTEM_PROMPT,
    ) -> None:
        self.model = model
        self.gatehouse = gatehouse
        self.budgets = budgets or Budgets()
        self.compensations = COMPENSATIONS if compensations is None else compensations
        self.approval_wait_seconds = approval_wait_seconds
        self.system_prompt = system_prompt

    async def run(self, task: str, *, conversation_id: str | None = None) -> RunResult:
        """Work on `task` until the model answers, gives up, or a budget runs out."""
        started = time.monotonic()
        deadline = started + self.budgets.max_seconds
        run = RunResult(conversation_id=conversation_id or uuid.uuid4().hex, status="", answer="")
        run.messages = [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": task}]
        saga = Saga(self.compensations)
        specs = [tool_spec(tool) for tool in await self.gatehouse.tools()] + [ABANDON_SPEC]
        try:
            await self._steps(run, saga, specs, deadline)
        finally:
            if run.status != "completed" and saga.done:
                run.compensations = await self._compensate(run, saga, deadline)
            run.seconds = time.monotonic() - started
        return run

    async def _steps(self, run: RunResult, saga: Saga, specs: list[JSONObject], deadline: float) -> None:
        for step in range(self.budgets.max_steps):
            last = step == self.budgets.max_steps - 1
            turn = await self._ask_model(run, None if last else specs, deadline)
            if turn is None:
                return
            run.steps = step + 1
            run.tokens += turn.input_tokens + turn.output_tokens
            run.messages.append(turn.as_message())
            if not turn.tool_calls:
                return _stop(run, "completed", turn.text)
            abandon = next((call for call in turn.tool_calls if call.name == ABANDON_TOOL), None)
            if abandon is not None:  # honoured even on the last step: giving up runs nothing
                reason = str((abandon.arguments or {}).get("reason", "")) or turn.text
                return _stop(run, "abandoned", reason, "the model abandoned the task")
            if last:  # offered no tools and still asked for some: it will not finish
                return _stop(run, "budget_exhausted", turn.text, "steps")
            await self._act(run, saga, step, turn, deadline)
            if run.tokens > self.budgets.max_tokens:
                return _stop(run, "budget_exhausted", turn.text, "tokens")
            if time.monotonic() >= deadline:
                return _stop(run, "budget_exhausted", turn.text, "time")
        _stop(run, "budget_exhausted", "", "steps")

    async def _ask_model(self, run: RunResult, tools: list[JSONObject] | None, deadline: float) -> ModelTurn | None:
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                return await self.model.complete(run.messages, tools)
        except TimeoutError:
            _stop(run, "budget_exhausted", "", "time")
        except Exception as exc:  # noqa: BLE001 — any model failure ends the run; the saga still compensates
            _stop(run, "model_error", "", f"the model failed: {exc}")
        return None

    async def _act(self, run: RunResult, saga: Saga, step: int, turn: ModelTurn, deadline: float) -> None:
        """Run the step's calls in parallel (they are independent by construction) and append the results."""
        calls = [call for call in turn.tool_calls if call.name != ABANDON_TOOL]
        justification = turn.text[:2000]
        outcomes = await asyncio.gather(
            *(
                self._call(run.conversation_id, step, index, call, justification, deadline)
                for index, call in enumerate(calls)
            )
        )
        for call, outcome in zip(calls, outcomes, strict=True):
            run.calls.append(outcome)
            saga.record(outcome, _clean(call.arguments or {}))
            run.messages.append({"role": "tool", "tool_call_id": call.id, "content": outcome.for_model()})

    async def _call(
        self, conversation_id: str, step: int, index: int, call: ToolRequest, justification: str, deadline: float
    ) -> ToolOutcome:
        if call.arguments is None:
            return error_outcome(
                call.name, "invalid_json", f"The arguments are not a JSON object: {call.raw_arguments[:200]}"
            )
        meta = {
            "gatehouse/conversation_id": conversation_id,
            "gatehouse/step": step,
            "gatehouse/call_index": index,
            "gatehouse/justification": justification,
        }
        outcome = await self.gatehouse.call(call.name, _clean(call.arguments), meta)
        return await self._settle(outcome, deadline)

    async def _settle(self, outcome: ToolOutcome, deadline: float) -> ToolOutcome:
        """Follow a call that is still running (or waiting for a reviewer, if allowed) until it settles."""
        if outcome.tool == STATUS_TOOL or outcome.is_error or outcome.call_id is None:
            return outcome  # a refusal or a failure is final: only running or pending calls are followed
        approval_deadline = time.monotonic() + self.approval_wait_seconds
        while outcome.status not in SETTLED or (
            outcome.status == "pending_approval" and time.monotonic() < approval_deadline
        ):
            limit = approval_deadline if outcome.status == "pending_approval" else deadline
            remaining = min(limit, deadline) - time.monotonic()
            if remaining <= 0:
                break
            followed = await self.gatehouse.status(outcome.call_id, min(remaining, 20.0))
            if followed.status == "error":
                break
            outcome = replace(followed, tool=outcome.tool)
        return outcome

    async def _compensate(self, run: RunResult, saga: Saga, deadline: float) -> list[ToolOutcome]:
        """Undo the saga log in reverse order (as step `run.steps`, so a retry maps to the same keys)."""
        undone = []
        for index, (compensation, forward) in enumerate(reversed(saga.done)):
            meta = {
                "gatehouse/conversation_id": run.conversation_id,
                "gatehouse/step": run.steps,
                "gatehouse/call_index": index,
                "gatehouse/justification": f"Compensation: undo {forward.tool} (call {forward.call_id}); "
                f"the task did not complete ({run.status}: {run.stop_reason}).",
            }
            outcome = await self.gatehouse.call(compensation.tool, compensation.arguments(forward.result), meta)
            undone.append(await self._settle(outcome, max(deadline, time.monotonic() + 30)))
        return undone


def _clean(arguments: JSONObject) -> JSONObject:
    """Drop a model-invented idempotency key: Gatehouse derives the real one from the envelope."""
    return {name: value for name, value in arguments.items() if name != "idempotency_key"}


def _stop(run: RunResult, status: str, answer: str, reason: str = "") -> None:
    run.status, run.answer, run.stop_reason = status, answer, reason


async def run_task(
    model: Model,
    url: str,
    token: str,
    task: str,
    *,
    budgets: Budgets | None = None,
    conversation_id: str | None = None,
    approval_wait_seconds: float = 0.0,
) -> RunResult:
    """Connect to Gatehouse at `url` with `token` and run one task."""
    async with Gatehouse(url, token) as gatehouse:
        loop = AgentLoop(model, gatehouse, budgets=budgets, approval_wait_seconds=approval_wait_seconds)
        return await loop.run(task, conversation_id=conversation_id)


def final_calls(run: RunResult, tool: str) -> Sequence[ToolOutcome]:
    """Return the run's calls of one tool (for reports and tests)."""
    return [outcome for outcome in run.calls if outcome.tool == tool]
