"""The reference agent loop, over MCP, against a live Gatehouse with a real Celery worker.

The model is scripted (no LLM); everything it asks for goes through `/mcp`, the
pipeline, the worker and the demo box office.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from agentloop.loop import Budgets, RunResult, final_calls, run_task
from agentloop.models import Message, ModelTurn, OpenAICompatibleModel, ScriptedModel, ToolRequest
from agentloop.scenarios import (
    SEATS_TASK,
    hold_cheapest,
    never_finishes_model,
    payment_fails_model,
    search_both_days,
    seats_model,
)
from approvals.models import ToolCall
from approvals.proposals import derive_key
from demo.models import Hold
from tests.conftest import AgentFactory
from tests.mcp_server import LiveAsgi
from tests.processes import http_server


@pytest.fixture
def box_office(make_agent: AgentFactory) -> str:
    return make_agent("box-office-agent", {"search_seats": 0, "hold_seats": 1, "release_hold": 1})[1]


@pytest.fixture
def gatehouse(live_asgi: LiveAsgi, box_office: str, celery_worker: Any, demo_services: str) -> tuple[str, str]:
    """(MCP URL, box-office token) of a Gatehouse that executes calls on the demo box office."""
    return live_asgi.mcp_url, box_office


def run(model: Any, gatehouse: tuple[str, str], **options: Any) -> RunResult:
    return asyncio.run(run_task(model, *gatehouse, SEATS_TASK, **options))


def test_the_loop_finds_two_seats_under_300_for_saturday_and_holds_them(gatehouse: tuple[str, str]) -> None:
    result = run(seats_model(), gatehouse, conversation_id="conv-seats")

    assert (result.status, result.steps) == ("completed", 3)
    (hold_call,) = final_calls(result, "hold_seats")
    hold = Hold.objects.get(hold_id=hold_call.result["hold_id"])
    assert hold.state == "active" and hold.event.event_id == "show-sabado"
    assert all(seat.price_centavos < 30000 for seat in hold.seats.all()) and hold.seats.count() == 2
    assert hold.hold_id in result.answer and not result.compensations
    # Keys derived from (conversation, step, call): step 0 made two calls, step 1 one.
    calls = ToolCall.objects.order_by("step", "call_index")
    assert [(c.tool.name, c.step, c.call_index) for c in calls] == [
        ("search_seats", 0, 0),
        ("search_seats", 0, 1),
        ("hold_seats", 1, 0),
    ]
    assert all(c.idempotency_key == derive_key("conv-seats", c.step, c.call_index) for c in calls)
    # The two searches of step 0 ran in parallel: each was proposed before the other finished.
    first, second = calls[0], calls[1]
    assert first.created_at < second.finished_at and second.created_at < first.finished_at


def test_a_rerun_of_the_same_conversation_replays_instead_of_holding_twice(gatehouse: tuple[str, str]) -> None:
    first = run(seats_model(), gatehouse, conversation_id="conv-again")
    second = run(seats_model(), gatehouse, conversation_id="conv-again")  # e.g. a restarted process

    assert first.status == second.status == "completed"
    hold_ids = {final_calls(r, "hold_seats")[0].result["hold_id"] for r in (first, second)}
    assert len(hold_ids) == 1 and Hold.objects.count() == 1
    assert ToolCall.objects.count() == 3


def test_the_loop_stops_at_its_step_budget_when_the_model_never_finishes(gatehouse: tuple[str, str]) -> None:
    model = never_finishes_model()
    result = run(model, gatehouse, budgets=Budgets(max_steps=3))

    assert (result.status, result.stop_reason, result.steps) == ("budget_exhausted", "steps", 3)
    assert model.calls == 3
    # The last step offers no tools; what the model still asked for there is not run.
    assert ToolCall.objects.count() == 4 and len(result.calls) == 4


def test_the_hold_is_released_when_the_payment_step_fails(gatehouse: tuple[str, str]) -> None:
    result = run(payment_fails_model(), gatehouse, conversation_id="conv-pay")

    assert result.status == "abandoned"
    (payment,) = final_calls(result, "charge_card")
    assert payment.is_error and payment.data["error"] == "unknown_or_not_permitted_tool"  # fed back as data
    (hold_call,) = final_calls(result, "hold_seats")
    (release,) = result.compensations
    assert (release.tool, release.status) == ("release_hold", "succeeded")
    assert Hold.objects.get(hold_id=hold_call.result["hold_id"]).state == "released"
    undo = ToolCall.objects.get(tool__name="release_hold")
    assert (undo.step, undo.call_index) == (result.steps, 0)
    assert "Compensation: undo hold_seats" in undo.justification


def test_token_and_time_budgets_stop_a_run_and_bad_model_json_is_fed_back(live_asgi: LiveAsgi, box_office: str) -> None:
    broken = ModelTurn(tool_calls=(ToolRequest(id="c1", name="search_seats", arguments=None, raw_arguments="{oops"),))
    chatty = ScriptedModel([lambda messages: broken], repeat_last=True)
    tokens = asyncio.run(
        run_task(chatty, live_asgi.mcp_url, box_office, "task", budgets=Budgets(max_steps=8, max_tokens=400))
    )
    assert (tokens.status, tokens.stop_reason) == ("budget_exhausted", "tokens")
    assert tokens.calls[0].data["error"] == "invalid_json" and not ToolCall.objects.exists()

    class SlowModel:
        async def complete(self, messages: Sequence[Message], tools: Any) -> ModelTurn:
            await asyncio.sleep(5)
            return ModelTurn(text="too late")

    slow = asyncio.run(run_task(SlowModel(), live_asgi.mcp_url, box_office, "task", budgets=Budgets(max_seconds=0.5)))
    assert (slow.status, slow.stop_reason, slow.steps) == ("budget_exhausted", "time", 0)


class ChatCompletions(BaseHTTPRequestHandler):
    """A scripted chat-completions endpoint: one tool call, then an answer that quotes the tool result."""

    requests: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        type(self).requests.append({"path": self.path, "auth": self.headers.get("authorization"), "body": body})
        if body["messages"][-1]["role"] == "user":
            arguments = json.dumps({"event_id": "nowhere", "quantity": 2, "max_price_brl": 300})
            call = {"id": "c1", "type": "function", "function": {"name": "search_seats", "arguments": arguments}}
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
        else:
            message = {"role": "assistant", "content": "Seen: " + body["messages"][-1]["content"][-200:]}
        payload = {"choices": [{"message": message}], "usage": {"prompt_tokens": 100, "completion_tokens": 10}}
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def llm_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    ChatCompletions.requests = []
    with http_server(ChatCompletions) as base:
        url = f"{base}/v1"
        monkeypatch.setenv("GATEHOUSE_LLM_URL", url)
        monkeypatch.setenv("GATEHOUSE_LLM_MODEL", "scripted-test-model")
        monkeypatch.setenv("GATEHOUSE_LLM_API_KEY", "sk-test")
        yield url


def test_an_openai_compatible_endpoint_configured_by_environment_drives_the_loop(
    gatehouse: tuple[str, str], llm_endpoint: str
) -> None:
    result = run(OpenAICompatibleModel.from_env(), gatehouse)

    assert (result.status, result.steps, result.tokens) == ("completed", 2, 220)
    first = ChatCompletions.requests[0]
    assert (first["path"], first["auth"], first["body"]["model"]) == (
        "/v1/chat/completions",
        "Bearer sk-test",
        "scripted-test-model",
    )
    offered = {spec["function"]["name"]: spec["function"]["parameters"] for spec in first["body"]["tools"]}
    assert "idempotency_key" not in offered["hold_seats"]["properties"]  # the loop owns keys
    assert "event_not_found" in result.answer or "nowhere" in result.answer  # the tool's error, read as data


def test_a_budget_that_runs_out_after_a_hold_also_releases_it(gatehouse: tuple[str, str]) -> None:
    model = ScriptedModel([search_both_days, hold_cheapest, search_both_days], repeat_last=True)
    result = run(model, gatehouse, budgets=Budgets(max_steps=4))

    assert (result.status, result.stop_reason) == ("budget_exhausted", "steps")
    (hold_call,) = final_calls(result, "hold_seats")
    assert [(c.tool, c.status) for c in result.compensations] == [("release_hold", "succeeded")]
    assert Hold.objects.get(hold_id=hold_call.result["hold_id"]).state == "released"
