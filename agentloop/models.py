"""The model side of the loop: one `complete()` call per step, scripted or over HTTP.

A model sees OpenAI-style chat messages and tool specs and answers with text
and/or tool calls. It never executes anything: the loop does, through Gatehouse.

- `ScriptedModel` replays a script of Python functions, so the loop runs (and is
  tested) with no LLM at all.
- `OpenAICompatibleModel` talks to any `/chat/completions` endpoint:
  GATEHOUSE_LLM_URL (base URL, e.g. http://localhost:11434/v1),
  GATEHOUSE_LLM_MODEL, GATEHOUSE_LLM_API_KEY (optional).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import httpx

from agentloop.jsontypes import JSONObject, JSONValue

Message = JSONObject


@dataclass(frozen=True)
class ToolRequest:
    """One tool call the model asked for. `arguments` is None when the model sent invalid JSON."""

    id: str
    name: str
    arguments: JSONObject | None
    raw_arguments: str = ""


@dataclass(frozen=True)
class ModelTurn:
    """What the model answered in one step."""

    text: str = ""
    tool_calls: tuple[ToolRequest, ...] = ()
    input_tokens: int = 0
    output_tokens: int = 0

    def as_message(self) -> Message:
        """Return the assistant message to append to the history."""
        message: Message = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.raw_arguments or json.dumps(call.arguments)},
                }
                for call in self.tool_calls
            ]
        return message


class Model(Protocol):
    async def complete(self, messages: Sequence[Message], tools: Sequence[JSONObject] | None) -> ModelTurn:
        """Answer the conversation so far; `tools=None` means "answer now, no more tool calls"."""
        ...


def estimate_tokens(value: JSONValue) -> int:
    """Return a rough token count (4 characters a token) for budgets when no real count exists."""
    return len(json.dumps(value, ensure_ascii=False, default=str)) // 4 + 1


def tool(name: str, arguments: JSONObject, call_id: str | None = None) -> ToolRequest:
    """Return a tool request for scripts."""
    return ToolRequest(id=call_id or f"call_{name}", name=name, arguments=arguments)


ScriptStep = Callable[[Sequence[Message]], ModelTurn]


@dataclass
class ScriptedModel:
    """Plays `script[i]` at the i-th model call; each step reads the history (tool results) it needs.

    After the script ends it answers `closing` (or, with `repeat_last`, plays the last step forever:
    a model that never finishes).
    """

    script: Sequence[ScriptStep]
    closing: str = "Done."
    repeat_last: bool = False
    calls: int = field(default=0, init=False)

    async def complete(self, messages: Sequence[Message], tools: Sequence[JSONObject] | None) -> ModelTurn:
        index = self.calls
        self.calls += 1
        if index < len(self.script):
            turn = self.script[index](messages)
        elif self.repeat_last and self.script:
            turn = self.script[-1](messages)
        else:
            turn = ModelTurn(text=self.closing)
        return ModelTurn(
            text=turn.text,
            tool_calls=turn.tool_calls,
            input_tokens=estimate_tokens(messages),
            output_tokens=estimate_tokens(turn.as_message()),
        )


def tool_results(messages: Sequence[Message]) -> list[JSONObject]:
    """Return the parsed JSON bodies of the tool results in the last step (what a script reads)."""
    results: list[JSONObject] = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        results.insert(0, json.loads(message["content"].rsplit("\n", 1)[-1]))
    return results


@dataclass
class OpenAICompatibleModel:
    """A chat-completions client (OpenAI, vLLM, Ollama, LiteLLM, …) configured from the environment."""

    url: str
    model: str
    api_key: str = ""
    timeout: float = 60.0

    @classmethod
    def from_env(cls) -> OpenAICompatibleModel:
        """Build from GATEHOUSE_LLM_URL / GATEHOUSE_LLM_MODEL / GATEHOUSE_LLM_API_KEY."""
        url = os.environ.get("GATEHOUSE_LLM_URL", "")
        model = os.environ.get("GATEHOUSE_LLM_MODEL", "")
        if not url or not model:
            raise RuntimeError("Set GATEHOUSE_LLM_URL and GATEHOUSE_LLM_MODEL to use an LLM.")
        return cls(url=url.rstrip("/"), model=model, api_key=os.environ.get("GATEHOUSE_LLM_API_KEY", ""))

    async def complete(self, messages: Sequence[Message], tools: Sequence[JSONObject] | None) -> ModelTurn:
        body: JSONObject = {"model": self.model, "messages": list(messages)}
        if tools:
            body["tools"] = list(tools)
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        async with httpx.AsyncClient(timeout=self.timeout) as http:
            response = await http.post(f"{self.url}/chat/completions", json=body, headers=headers)
        response.raise_for_status()
        return parse_completion(response.json(), messages)


def parse_completion(payload: JSONObject, messages: Sequence[Message]) -> ModelTurn:
    """Turn a chat-completions response into a ModelTurn (invalid argument JSON is kept, not raised)."""
    message = payload["choices"][0]["message"]
    calls = []
    for item in message.get("tool_calls") or []:
        raw = item["function"].get("arguments") or "{}"
        try:
            arguments = json.loads(raw)
        except json.JSONDecodeError:
            arguments = None
        calls.append(
            ToolRequest(
                id=item["id"],
                name=item["function"]["name"],
                arguments=arguments if isinstance(arguments, dict) else None,
                raw_arguments=raw,
            )
        )
    usage = payload.get("usage") or {}
    return ModelTurn(
        text=message.get("content") or "",
        tool_calls=tuple(calls),
        input_tokens=usage.get("prompt_tokens") or estimate_tokens(messages),
        output_tokens=usage.get("completion_tokens") or estimate_tokens(message),
    )
