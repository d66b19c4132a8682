"""Traces of a call's life (OpenTelemetry) and the call id in every log line.

Tracing is off unless the standard variables say where spans go
(`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
`OTEL_TRACES_EXPORTER`; `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`
keep it off). Off, a proposal pays one cached flag test: the SDK is not even
imported. On, each process exports its own spans over OTLP/HTTP (protobuf).

One trace follows a call: the agent's `traceparent` (its HTTP request, or the MCP
request's `_meta`, which the MCP SDK's own `tools/call` span reads) parents the
proposal's `execute_tool {tool}` span. The call keeps that span's context (its
`traceparent` and `tracestate` columns; the agent's own when this process does not
trace), and every execution message carries the kept context in its headers, so the
worker's `execute_tool {tool}` span is the proposal's child whether the call ran at
once or a reviewer approved it hours later (or the sweeper sent it again). The
executor sends it downstream as `traceparent` (`toolcatalog.executors`). Spans
name the tool, the call and the conversation (GenAI semantic conventions), never
an argument value.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar, Token
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING

from celery import Task
from celery.signals import before_task_publish, task_postrun, task_prerun
from django.core.signals import request_started
from django.dispatch import receiver
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Tracer

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

# Any task: only its name and request are read.
CeleryTask = Task[[], object]
# The call being handled in this context (a proposal, an execution), for log lines.
CALL_ID: ContextVar[str | None] = ContextVar("gatehouse_call_id", default=None)
EXECUTE_CALL = "approvals.tasks.execute_call"  # as approvals.messages names it (importing it would load the models)
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER")
TRACE_HEADERS = ("traceparent", "tracestate")
# W3C Trace Context: version 00's traceparent, and the most of a tracestate a call keeps (its column's size).
TRACEPARENT = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
MAX_TRACESTATE = 512
# The trace context the call being proposed in this context keeps: (traceparent, tracestate).
PROPOSAL_TRACE: ContextVar[tuple[str, str]] = ContextVar("gatehouse_proposal_trace", default=("", ""))

_lock = threading.Lock()
_enabled: bool | None = None
_installed = False
# The worker's open span (and the context token to restore) per task id, from prerun to postrun.
_task_spans: dict[str, tuple[Span, Token[otel_context.Context]]] = {}


class TelemetryConfigurationError(RuntimeError):
    """The OTEL_* variables ask for something Gatehouse does not ship."""


def wanted(environ: Mapping[str, str]) -> bool:
    """Return whether `environ` asks for traces to be exported."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return any(environ.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def tracing_enabled() -> bool:
    """Return whether this process traces, installing the exporter the first time (read once from the environment)."""
    if _enabled is None:
        configure(os.environ)
    return bool(_enabled)


def configure(environ: Mapping[str, str]) -> bool:
    """Turn tracing on or off for this process from `environ`; return whether it is on.

    The tracer provider is installed once per process (OpenTelemetry allows no second);
    turning tracing off again only stops Gatehouse from starting spans.
    """
    global _enabled, _installed
    with _lock:
        on = wanted(environ)
        if on and not _installed:
            trace.set_tracer_provider(_provider(environ))
            _installed = True
        _enabled = on
    return on


def _provider(environ: Mapping[str, str]) -> trace.TracerProvider:
    """Return an SDK tracer provider exporting in batches as `environ` says (OTLP/HTTP or the console)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    exporter_name = environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    exporter: SpanExporter
    if exporter_name == "console":
        exporter = ConsoleSpanExporter()
    elif exporter_name == "otlp":
        exporter = _otlp_exporter(environ)
    else:
        raise TelemetryConfigurationError(f"OTEL_TRACES_EXPORTER={exporter_name!r}: use otlp, console or none")
    # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES itself; this is the default name.
    resource = Resource.create({"service.name": environ.get("OTEL_SERVICE_NAME") or "gatehouse"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(exporter))  # OTEL_BSP_* tune it
    return provider


def _otlp_exporter(environ: Mapping[str, str]) -> SpanExporter:
    """Return the OTLP/HTTP exporter (it reads its endpoint, headers and timeout from the OTEL_* variables)."""
    protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    if protocol and protocol.strip() != "http/protobuf":
        raise TelemetryConfigurationError(f"OTLP protocol {protocol!r}: Gatehouse exports http/protobuf only")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def tracer() -> Tracer:
    """Return Gatehouse's tracer."""
    return trace.get_tracer("gatehouse")


class ProposalScope:
    """A proposal being handled: its span when tracing, and its call id for the request's log lines.

    `carrier`: where the agent's trace context is (its HTTP headers); None to take
    the current context (the MCP SDK's `tools/call` span, parented by `_meta`).
    """

    def __init__(self, carrier: Mapping[str, str] | None, *, tool: str, conversation_id: str | None) -> None:
        self.carrier, self.tool, self.conversation_id = carrier, tool, conversation_id
        self.span: Span | None = None
        self._span_scope: AbstractContextManager[Span] | None = None
        self._trace_token: Token[tuple[str, str]] | None = None

    def __enter__(self) -> ProposalScope:
        if tracing_enabled():
            parent = _parent_context(self.carrier)
            attributes = gen_ai_attributes(self.tool, None, self.conversation_id)
            kind = SpanKind.SERVER if self.carrier is not None else SpanKind.INTERNAL
            # Not the exception's text: a refusal's message may quote what the agent sent.
            self._span_scope = tracer().start_as_current_span(
                f"execute_tool {self.tool}",
                context=parent,
                kind=kind,
                attributes=attributes,
                record_exception=False,
                set_status_on_exception=False,
            )
            self.span = self._span_scope.__enter__()
            kept = _current_trace()
        else:
            kept = _agents_trace(self.carrier)
        self._trace_token = PROPOSAL_TRACE.set(kept)
        return self

    def called(self, call_id: object, status: str, risk_tier: int | None) -> None:
        """Note the call the proposal made (or replayed): on the span, and in log lines to the request's end."""
        CALL_ID.set(str(call_id))  # cleared when the thread's next request starts (_forget_call_id)
        if self.span is not None:
            self.span.set_attribute("gen_ai.tool.call.id", str(call_id))
            self.span.set_attribute("gatehouse.call.status", status)
            if risk_tier is not None:
                self.span.set_attribute("gatehouse.risk_tier", risk_tier)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._trace_token is not None:
            PROPOSAL_TRACE.reset(self._trace_token)
        if self.span is not None and exc is not None:
            # A refusal's code (ApiError.code), or the kind of failure: the agent's input stays out of the span.
            self.span.set_attribute("error.type", str(getattr(exc, "code", type(exc).__qualname__)))
            self.span.set_status(trace.StatusCode.ERROR)
        if self._span_scope is not None:
            self._span_scope.__exit__(kind, exc, tb)


def proposal_trace() -> dict[str, str]:
    """Return the trace context a call proposed now keeps (its `traceparent` and `tracestate` fields)."""
    traceparent, tracestate = PROPOSAL_TRACE.get()
    return {"traceparent": traceparent, "tracestate": tracestate}


def message_headers(traceparent: str, tracestate: str) -> dict[str, str]:
    """Return the headers that make an execution message continue a call's kept trace context (none if it has none)."""
    if not traceparent:
        return {}
    return {"traceparent": traceparent, "tracestate": tracestate} if tracestate else {"traceparent": traceparent}


def _current_trace() -> tuple[str, str]:
    """Return the current span's context as W3C headers (the proposal's span, when tracing)."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return _kept(carrier)


def _agents_trace(carrier: Mapping[str, str] | None) -> tuple[str, str]:
    """Return the agent's own trace context from its request's headers, if well formed (this process does not trace)."""
    if carrier is None:
        return "", ""
    return _kept({name: carrier.get(name) or "" for name in TRACE_HEADERS})


def _kept(carrier: Mapping[str, str]) -> tuple[str, str]:
    """Return (traceparent, tracestate) as a call keeps them: a well-formed traceparent, and a tracestate that fits."""
    traceparent = carrier.get("traceparent", "").strip().lower()
    if not TRACEPARENT.fullmatch(traceparent):
        return "", ""
    tracestate = carrier.get("tracestate", "").strip()
    return traceparent, tracestate if len(tracestate) <= MAX_TRACESTATE else ""


@contextmanager
def incoming(headers: Mapping[str, str]) -> Iterator[None]:
    """Make the trace context of a request's headers the current one while it is served (when tracing)."""
    parent = _parent_context(headers) if tracing_enabled() else None
    token = otel_context.attach(parent) if parent is not None else None
    try:
        yield
    finally:
        if token is not None:
            otel_context.detach(token)


@receiver(request_started)
def _forget_call_id(**kwargs: object) -> None:
    """Start each request with no call id: a WSGI thread serves many requests in one context."""
    CALL_ID.set(None)


def _parent_context(carrier: Mapping[str, str] | None) -> otel_context.Context | None:
    """Return the context the agent sent (None: the current one)."""
    if carrier is None:
        return None
    present = {name: carrier[name] for name in TRACE_HEADERS if carrier.get(name)}
    return propagate.extract(present) if present else None


def gen_ai_attributes(tool: str, call_id: str | None, conversation_id: str | None) -> dict[str, str]:
    """Return the GenAI semantic-convention attributes of a tool call (names only: never its arguments)."""
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool}
    if call_id:
        attributes["gen_ai.tool.call.id"] = call_id
    if conversation_id:
        attributes["gen_ai.conversation.id"] = conversation_id
    return attributes


# ------------------------------------------------------------------ Celery: the message and the worker


@before_task_publish.connect
def _inject_into_message(headers: dict[str, object] | None = None, **kwargs: object) -> None:
    """Carry the sender's trace context in the message's headers (the worker sees them on `task.request`).

    A message that already carries one (an execution: the context its call keeps) is left as it is.
    """
    if headers is not None and not headers.get("traceparent") and tracing_enabled():
        propagate.inject(headers)


@task_prerun.connect
def _task_started(
    task_id: str = "", task: CeleryTask | None = None, kwargs: dict[str, object] | None = None, **_: object
) -> None:
    """Open the execution's span (child of the proposal's) and set the call id for its log lines."""
    if task is None or task.name != EXECUTE_CALL or not kwargs:
        return
    call_id, tool = str(kwargs.get("call_id", "")), str(kwargs.get("tool", ""))
    CALL_ID.set(call_id)  # the worker's context is the task's own: postrun clears it
    if not tracing_enabled():
        return
    carrier = {name: value for name in TRACE_HEADERS if isinstance(value := task.request.get(name), str)}
    parent = propagate.extract(carrier) if carrier else None
    attributes: dict[str, str | int] = {
        **gen_ai_attributes(tool, call_id, None),
        "gatehouse.attempt": int(str(kwargs.get("attempts", 0))),
    }
    span = tracer().start_span(f"execute_tool {tool}", context=parent, kind=SpanKind.CONSUMER, attributes=attributes)
    _task_spans[task_id] = (span, otel_context.attach(trace.set_span_in_context(span, parent)))


@task_postrun.connect
def _task_finished(task_id: str = "", task: CeleryTask | None = None, state: str | None = None, **_: object) -> None:
    """Close the execution's span and forget the call id."""
    if task is None or task.name != EXECUTE_CALL:
        return
    CALL_ID.set(None)
    opened = _task_spans.pop(task_id, None)
    if opened is None:
        return
    span, token = opened
    if state:
        span.set_attribute("celery.state", state)
    if state == "FAILURE":
        span.set_status(trace.StatusCode.ERROR)
    otel_context.detach(token)
    span.end()


# ------------------------------------------------------------------ JSON log lines


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, the call id being handled, trace ids, exception."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        call_id = CALL_ID.get()
        if call_id:
            entry["call_id"] = call_id
        span_context = trace.get_current_span().get_span_context()
        if span_context.is_valid:
            entry["trace_id"] = format(span_context.trace_id, "032x")
            entry["span_id"] = format(span_context.span_id, "016x")
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)
