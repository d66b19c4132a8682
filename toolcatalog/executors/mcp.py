"""The `mcp` executor kind: a tool of an upstream MCP server, called with the official SDK.

A tool's executor reference is `<upstream>/<upstream tool name>` (set by the sync,
`toolcatalog.upstreams_sync`). Each attempt opens a client session to the upstream
(Streamable HTTP with its headers, or the stdio command, started here by the worker),
sends one tools/call with exactly the approved arguments, and keeps `content`,
`structuredContent` and `isError`.

How outcomes are classified for the worker (`approvals.execution`):

- the upstream answered `isError` → PermanentError: the call fails, its text kept as data;
- nothing was sent (unreachable, refused before the request) → RetryableError;
  bad credentials or a server that is not MCP → PermanentError (trying again will not help);
- sent but unanswered (timeout, connection lost, the upstream died) → OutcomeUnknown:
  MCP has no idempotency key, so a write is never sent again automatically; it needs a
  person. A tool an admin marks repeat-safe, or one the upstream declares read-only,
  is retried instead (RetryableError).

Preview and verification: an admin may name a read-only tool of the same upstream,
with an argument mapping (`UpstreamTool.preview_tool`, `preview_arguments`); it runs as
the dry run ("before") and again after the call (what the reviewer then sees as the
effect). Without one, the dry run says plainly that the upstream offers no dry run.
"""

from __future__ import annotations

import mcp.types as types

from audit.typealiases import JSONObject, JSONValue
from toolcatalog.executors.base import (
    ExecutionContext,
    Executor,
    OutcomeUnknown,
    PermanentError,
    RetryableError,
    Verification,
)
from toolcatalog.upstreams import UpstreamTool
from toolcatalog.upstreams_client import Endpoint, UpstreamError, call_tool

NO_DRY_RUN = (
    "This upstream MCP server offers no dry run: nothing was sent to it. The upstream declares this tool {hints}. "
    "Read the arguments and the tier reasons; approving sends exactly these arguments, once."
)


def result_body(result: types.CallToolResult) -> JSONObject:
    """Return what the call keeps of an upstream's answer: content, structuredContent, isError."""
    dumped = result.model_dump(by_alias=True, exclude_none=True, mode="json")
    return {
        "content": dumped.get("content", []),
        "structuredContent": dumped.get("structuredContent"),
        "isError": bool(result.is_error),
    }


def text_of(body: JSONObject) -> str:
    """Return the text blocks of an answer, joined (what a person or a model reads of an error)."""
    blocks = body.get("content") or []
    texts = [str(b.get("text", "")) for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
    return "\n".join(texts)[:2000] or "the upstream reported an error without text"


class McpExecutor(Executor):
    """Calls one tool of one upstream MCP server."""

    def __init__(self, ref: str) -> None:
        super().__init__(ref)
        self.upstream_name, _, self.remote_name = ref.partition("/")

    # A property, read per attempt: an admin may mark the tool repeat-safe at any time.
    @property
    def idempotent_delivery(self) -> bool:  # type: ignore[override]
        """True when an unanswered attempt may be sent again: the admin said so, or the upstream says read-only."""
        link = UpstreamTool.objects.select_related("tool").filter(**self._lookup()).first()
        return link is not None and repeat_safe(link)

    def _lookup(self) -> dict[str, str]:
        return {"upstream__name": self.upstream_name, "remote_name": self.remote_name}

    def link(self) -> UpstreamTool:
        link = UpstreamTool.objects.select_related("upstream", "tool").filter(**self._lookup()).first()
        if link is None:
            raise PermanentError(f"no upstream tool {self.ref!r} (was its upstream removed?)")
        if not link.upstream.enabled:
            raise PermanentError(f"upstream {self.upstream_name} is disabled: its calls are not sent")
        return link

    def execute(self, ctx: ExecutionContext) -> JSONObject:
        """Send tools/call with exactly the approved arguments; return the upstream's answer."""
        link = self.link()
        body = self._call(link, self.remote_name, ctx.arguments, retry_safe=repeat_safe(link))
        if body["isError"]:
            raise PermanentError(text_of(body), detail={"body": body})
        return body

    def _call(self, link: UpstreamTool, name: str, arguments: JSONObject, *, retry_safe: bool) -> JSONObject:
        try:
            return result_body(call_tool(Endpoint.of(link.upstream), name, arguments))
        except UpstreamError as error:
            raise classified(error, retry_safe=retry_safe) from error

    def dry_run(self, ctx: ExecutionContext) -> JSONObject:
        """Run the tool's preview tool (a read) as the "before"; without one, say there is no dry run."""
        link = self.link()
        tool = link.tool
        if not link.preview_tool:
            return {
                "summary": NO_DRY_RUN.format(hints=hints(tool.annotations)),
                "before": None,
                "after": None,
                "arguments": ctx.arguments,
                "annotations": tool.annotations,
                "dry_run": False,
            }
        observed = self._read(link, ctx.arguments)
        return {
            "summary": f"Read with {link.preview_tool} on upstream {link.upstream.name} (no change made).",
            "before": observed,
            "after": None,
            "dry_run": True,
        }

    def verify(self, ctx: ExecutionContext, result: JSONObject) -> Verification:
        """Read the effect back with the preview tool; without one, the upstream's own answer is the confirmation."""
        link = self.link()
        if not link.preview_tool:
            return Verification(
                confirmed=True, observed={}, detail="The upstream answered without isError (it offers no read-back)."
            )
        observed = self._read(link, ctx.arguments)
        return Verification(confirmed=True, observed={"after": observed}, detail=f"Read back with {link.preview_tool}.")

    def _read(self, link: UpstreamTool, arguments: JSONObject) -> JSONValue:
        """Call the preview tool with the mapped arguments; return its structured answer (or its text)."""
        mapped = {target: arguments[source] for target, source in link.preview_arguments.items() if source in arguments}
        body = self._call(link, link.preview_tool, mapped, retry_safe=True)
        if body["isError"]:
            raise PermanentError(f"{link.preview_tool} answered an error: {text_of(body)}", detail={"body": body})
        return body["structuredContent"] if body["structuredContent"] is not None else text_of(body)


def hints(annotations: JSONObject) -> str:
    """Return a tool's annotations in words: "read-only", or "a destructive, not idempotent write"."""
    if annotations.get("readOnlyHint"):
        return "read-only"
    destructive = "destructive" if annotations.get("destructiveHint") else "non-destructive"
    idempotent = "idempotent" if annotations.get("idempotentHint") else "not idempotent"
    world = "reaching outside systems" if annotations.get("openWorldHint") else "closed-world"
    return f"a {destructive}, {idempotent} write, {world}"


def repeat_safe(link: UpstreamTool) -> bool:
    """Return whether sending the tool's call twice is harmless: marked so by an admin, or declared read-only."""
    return link.repeat_safe or link.tool.read_only_hint


def classified(error: UpstreamError, *, retry_safe: bool) -> Exception:
    """Return the executor error an upstream failure means (see the module docstring)."""
    detail: JSONObject = {"upstream_error": error.code}
    if error.code == "refused":  # answered with a JSON-RPC error: it will answer the same again
        return PermanentError(str(error), detail=detail)
    if not error.sent:
        if error.code in ("unauthorized", "not_mcp"):
            return PermanentError(str(error), detail=detail)
        return RetryableError(str(error), detail=detail)
    if retry_safe:
        return RetryableError(f"{error} (sent, unanswered; the tool is safe to send again)", detail=detail)
    return OutcomeUnknown(f"{error}; MCP has no idempotency key, so it is not sent again", detail=detail)
