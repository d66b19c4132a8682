"""An OTLP/HTTP collector in the test process: it keeps every span any process exports to it.

`collector` points this process's tracing at it (started once per session)
(`approvals.telemetry`); a worker started with `collector.environment()` exports
to it too, so a test reads one trace across processes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from approvals import telemetry
from tests.processes import http_server


@dataclass(frozen=True)
class ExportedSpan:
    """One span as it arrived: ids in lowercase hex, attributes as plain values."""

    service: str
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: int
    attributes: dict[str, Any]
    events: list[str]


@dataclass
class Collector:
    url: str = ""
    spans: list[ExportedSpan] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def received(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        with self.lock:
            for resource_spans in request.resource_spans:
                resource = {kv.key: plain(kv.value) for kv in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    self.spans.extend(exported(resource, span) for span in scope_spans.spans)

    def trace(self, trace_id: str) -> list[ExportedSpan]:
        """Return the spans received so far of one trace (after this process's own are flushed)."""
        provider = trace.get_tracer_provider()
        if hasattr(provider, "force_flush"):
            provider.force_flush()
        with self.lock:
            return [span for span in self.spans if span.trace_id == trace_id]

    def environment(self) -> dict[str, str]:
        """Return the variables that make a Gatehouse process export its spans here, at once."""
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": self.url, "OTEL_BSP_SCHEDULE_DELAY": "100"}


def plain(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [plain(item) for item in value.array_value.values]
    return getattr(value, kind) if kind else None


def exported(resource: dict[str, Any], span: Any) -> ExportedSpan:
    return ExportedSpan(
        service=str(resource.get("service.name", "")),
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        parent_span_id=span.parent_span_id.hex(),
        name=span.name,
        kind=span.kind,
        attributes={kv.key: plain(kv.value) for kv in span.attributes},
        events=[event.name for event in span.events]
        + [str(plain(kv.value)) for event in span.events for kv in event.attributes],
    )


def handler_for(collector: Collector) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path == "/v1/traces":
                collector.received(body)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture(scope="session")
def collector_server() -> Iterator[Collector]:
    """The collector, one for the session: this process's exporter, installed once, keeps its address."""
    found = Collector()
    with http_server(handler_for(found)) as url:
        found.url = url
        yield found


@pytest.fixture
def collector(collector_server: Collector, monkeypatch: pytest.MonkeyPatch) -> Iterator[Collector]:
    """Collect spans; this process traces to the collector for the test's duration."""
    for name, value in {**collector_server.environment(), "OTEL_SERVICE_NAME": "gatehouse-web"}.items():
        monkeypatch.setenv(name, value)
    telemetry.configure(os.environ)
    yield collector_server
    telemetry.configure({})  # the provider stays (one per process); Gatehouse starts no more spans
