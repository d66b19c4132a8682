"""The loop's connection to Gatehouse: the official MCP SDK client over Streamable HTTP.

Identity is the bearer token of the HTTP connection, never something the model
writes. Idempotency travels in each request's `_meta` (`gatehouse/conversation_id`,
`gatehouse/step`, `gatehouse/call_index`), from which Gatehouse derives the key:
the same logical attempt always maps to the same call.
"""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import cast

import httpx2
import mcp.types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from agentloop.jsontypes import JSONObject, JSONValue

STATUS_TOOL = "get_call_status"
SETTLED = frozenset(
    {"pending_approval", "succeeded", "failed", "rejected", "expired", "needs_reconciliation", "refused"}
)


@dataclass(frozen=True)
class ToolOutcome:
    """One tool call's answer as the loop keeps it: the structured body and what the model reads."""

    tool: str
    data: JSONObject
    summary: str
    is_error: bool

    @property
    def status(self) -> str:
        """Return the call's status, or "error" for a refusal (an error body has no status)."""
        return str(self.data.get("status") or "error")

    @property
    def call_id(self) -> str | None:
        """Return the id of the call this answer is about (a refusal names the refused call's id)."""
        return self.data.get("id") or self.data.get("call_id")

    @property
    def result(self) -> JSONValue:
        return self.data.get("result")

    def for_model(self) -> str:
        """Return the tool message content: the plain-words summary, then the JSON body on the last line."""
        body = json.dumps(self.data, ensure_ascii=False, separators=(",", ":"))
        return f"{self.summary}\n{body}" if self.summary else body


def outcome_from(tool: str, result: types.CallToolResult) -> ToolOutcome:
    """Return the ToolOutcome of an MCP tool result (Gatehouse always sends structured content)."""
    texts = [block.text for block in result.content if isinstance(block, types.TextContent)]
    data = result.structured_content if isinstance(result.structured_content, dict) else {}
    if not data and texts:
        data = {"error": "unstructured_result", "message": texts[-1]}
    summary = texts[0] if len(texts) > 1 else ""
    return ToolOutcome(tool=tool, data=data, summary=summary, is_error=bool(result.is_error))


def error_outcome(tool: str, code: str, message: str) -> ToolOutcome:
    """Return a failure that never reached Gatehouse (bad JSON from the model, a dropped connection) as data."""
    return ToolOutcome(tool=tool, data={"error": code, "message": message}, summary="", is_error=True)


class Gatehouse:
    """An MCP session with Gatehouse for one agent token (`async with Gatehouse(url, token) as gatehouse:`)."""

    def __init__(self, url: str, token: str, *, timeout: float = 60.0) -> None:
        self.url = url
        self.token = token
        self.timeout = timeout
        self._stack = AsyncExitStack()
        self.session: ClientSession | None = None

    async def __aenter__(self) -> Gatehouse:
        try:
            http = await self._stack.enter_async_context(
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {self.token}"}, timeout=self.timeout)
            )
            read, write = await self._stack.enter_async_context(streamable_http_client(self.url, http_client=http))
            self.session = await self._stack.enter_async_context(ClientSession(read, write))
            await self.session.initialize()
        except BaseException:
            # `async with` skips __aexit__ when __aenter__ fails: close what was opened here,
            # in this task (the SDK's task groups must be exited where they were entered).
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    def _session(self) -> ClientSession:
        if self.session is None:
            raise RuntimeError("use `async with Gatehouse(...)`")
        return self.session

    async def tools(self) -> list[types.Tool]:
        """Return the tools this agent may use (Gatehouse lists only its grants)."""
        return list((await self._session().list_tools()).tools)

    async def call(self, name: str, arguments: JSONObject, meta: JSONObject) -> ToolOutcome:
        """Propose one call; transport failures come back as data too, so the loop never crashes on them."""
        try:
            # RequestParamsMeta is an open TypedDict (extra_items, PEP 728), which mypy does not read yet.
            result = await self._session().call_tool(name, arguments, meta=cast(types.RequestParamsMeta, meta))
        except (MCPError, httpx2.HTTPError, OSError) as exc:
            return error_outcome(name, "transport_error", f"Gatehouse could not be reached: {exc}")
        except RuntimeError as exc:  # the SDK refuses a result that breaks the tool's outputSchema
            return error_outcome(name, "invalid_result", str(exc))
        return outcome_from(name, result)

    async def status(self, call_id: str, wait_seconds: float) -> ToolOutcome:
        """Return the call's current state, waiting up to `wait_seconds` for it to change."""
        arguments = {"call_id": call_id, "wait_seconds": max(0.0, min(wait_seconds, 60.0))}
        return await self.call(STATUS_TOOL, arguments, {})
