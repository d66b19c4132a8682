"""One trace per call, across processes: the agent's traceparent → the proposal → the worker → the downstream.

A held call keeps its proposal's trace context: executed after a reviewer's approval,
it is still in the agent's trace.

The web side runs in this process (the Django test client, the live servers), the
worker is a real Celery process; both export OTLP/HTTP to the collector this test
runs, and the demo downstream (served by the live server) records the traceparent
it was sent.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.signals import request_started
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from approvals import lifecycle, telemetry
from approvals.models import ToolCall
from tests.conftest import refund
from tests.mcp_server import LiveAsgi
from tests.otlp_collector import Collector, ExportedSpan, collector, collector_server  # noqa: F401 — fixtures
from tests.processes import BASE_DIR, CeleryWorker, wait_until
from tests.test_mcp import rpc

# What the agent sends as arguments: none of it may appear in any span.
ARGUMENT_VALUES = ("PED-00000001", "4321", "atraso_entrega")


@pytest.fixture
def downstream_traceparents() -> Iterator[list[str]]:
    """Record the traceparent of every request the demo downstream receives."""
    seen: list[str] = []

    def record(sender: Any, environ: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if environ and environ.get("PATH_INFO", "").startswith("/demo-services/"):
            seen.append(environ.get("HTTP_TRACEPARENT", ""))

    request_started.connect(record, weak=False)
    yield seen
    request_started.disconnect(record)


@pytest.fixture
def traced_worker(start_worker: Any, collector: Collector) -> CeleryWorker:  # noqa: F811
    worker: CeleryWorker = start_worker(**collector.environment(), OTEL_SERVICE_NAME="gatehouse-worker")
    return worker


def agent_traceparent() -> tuple[str, str, str]:
    """Return (traceparent, trace id, span id) of a span the agent is in."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def one_named(spans: list[ExportedSpan], name: str, service: str) -> ExportedSpan:
    found = [span for span in spans if span.name == name and span.service == service]
    assert len(found) == 1, spans
    return found[0]


def assert_no_argument_values(spans: list[ExportedSpan], *also: str) -> None:
    text = repr([(span.name, span.attributes, span.events) for span in spans])
    assert not [value for value in (*ARGUMENT_VALUES, *also) if value in text]


def reviewer() -> Any:
    user = get_user_model().objects.create_user("rita")
    user.user_permissions.add(Permission.objects.get(codename="review_toolcall"))
    return get_user_model().objects.get(pk=user.pk)  # fresh: permissions are cached per instance


@pytest.mark.worker
def test_one_trace_runs_from_the_agents_request_through_the_worker_to_the_downstream(
    collector: Collector,  # noqa: F811
    traced_worker: CeleryWorker,
    demo_services: str,
    agent_api: Any,
    downstream_traceparents: list[str],
) -> None:
    traceparent, trace_id, agent_span_id = agent_traceparent()
    api = agent_api()
    api.headers["traceparent"] = traceparent
    body = refund(4321, motivo="atraso_entrega", conversation_id="conv-trace", step=0, call_index=0)

    call_id = api.propose(body).json()["id"]
    wait_until(lambda: ToolCall.objects.filter(pk=call_id, status="succeeded").exists(), timeout=20)

    spans = wait_until(lambda: (found := collector.trace(trace_id)) and len(found) >= 2 and found, timeout=10)
    proposal = one_named(spans, "execute_tool emitir_estorno", "gatehouse-web")
    execution = one_named(spans, "execute_tool emitir_estorno", "gatehouse-worker")
    assert proposal.parent_span_id == agent_span_id
    assert proposal.kind == Span.SPAN_KIND_SERVER
    assert proposal.attributes == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "emitir_estorno",
        "gen_ai.conversation.id": "conv-trace",
        "gen_ai.tool.call.id": call_id,
        "gatehouse.call.status": "approved",
        "gatehouse.risk_tier": 1,
    }
    assert execution.parent_span_id == proposal.span_id
    assert execution.kind == Span.SPAN_KIND_CONSUMER
    assert execution.attributes["gen_ai.tool.call.id"] == call_id
    assert execution.attributes["gen_ai.tool.name"] == "emitir_estorno"
    # The refund's request and its verification, both sent from inside the worker's span.
    assert downstream_traceparents == [f"00-{trace_id}-{execution.span_id}-01"] * 2
    assert_no_argument_values(spans)


@pytest.mark.worker
def test_a_held_call_a_reviewer_approves_later_is_executed_in_the_agents_trace(
    collector: Collector,  # noqa: F811
    traced_worker: CeleryWorker,
    demo_services: str,
    agent_api: Any,
    downstream_traceparents: list[str],
) -> None:
    traceparent, trace_id, agent_span_id = agent_traceparent()
    api = agent_api()
    api.headers["traceparent"] = traceparent
    api.headers["tracestate"] = "vendor=agent-loop"
    body = refund(
        35000, pedido="PED-00000005", motivo="atraso_entrega", conversation_id="conv-held", step=0, call_index=0
    )
    held = api.propose(body).json()
    assert held["status"] == "pending_approval"

    # The reviewer's approval runs with no trace context of the agent's around it.
    assert lifecycle.approve(ToolCall.objects.get(pk=held["id"]), reviewer())
    wait_until(lambda: ToolCall.objects.filter(pk=held["id"], status="succeeded").exists(), timeout=20)

    spans = wait_until(lambda: (found := collector.trace(trace_id)) and len(found) >= 2 and found, timeout=10)
    proposal = one_named(spans, "execute_tool emitir_estorno", "gatehouse-web")
    execution = one_named(spans, "execute_tool emitir_estorno", "gatehouse-worker")
    assert proposal.parent_span_id == agent_span_id
    assert proposal.attributes["gatehouse.call.status"] == "pending_approval"
    call = ToolCall.objects.get(pk=held["id"])
    assert (call.traceparent, call.tracestate) == (f"00-{trace_id}-{proposal.span_id}-01", "vendor=agent-loop")
    assert execution.parent_span_id == proposal.span_id
    assert execution.attributes["gen_ai.tool.call.id"] == held["id"]
    assert downstream_traceparents == [f"00-{trace_id}-{execution.span_id}-01"] * 2
    assert_no_argument_values(spans, "PED-00000005", "35000")


@pytest.mark.parametrize(
    ("headers", "kept"),
    [
        (
            {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "v=1"},
            ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "v=1"),
        ),
        (
            {"traceparent": "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-00"},
            ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", ""),
        ),
        ({"traceparent": "00-00000000000000000000000000000000-b7ad6b7169203331-01"}, ("", "")),
        ({"traceparent": "not a traceparent", "tracestate": "v=1"}, ("", "")),
        (
            {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "v=" + "x" * 600},
            ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", ""),
        ),
        ({}, ("", "")),
    ],
)
def test_without_tracing_a_call_keeps_the_agents_trace_context_only_when_well_formed(
    headers: dict[str, str], kept: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(telemetry, "_enabled", False)

    with telemetry.ProposalScope(headers, tool="emitir_estorno", conversation_id=None) as scope:
        fields = telemetry.proposal_trace()

    assert scope.span is None
    assert (fields["traceparent"], fields["tracestate"]) == kept
    assert telemetry.proposal_trace() == {"traceparent": "", "tracestate": ""}  # only inside the proposal


def test_a_refused_proposal_is_traced_with_its_error_code_and_not_the_agents_input(
    collector: Collector,  # noqa: F811
    agent_api: Any,
) -> None:
    traceparent, trace_id, agent_span_id = agent_traceparent()
    api = agent_api()
    api.headers["traceparent"] = traceparent

    response = api.propose(refund(4321, pedido="PED-00000001x", motivo="atraso_entrega", idempotency_key="k-1"))

    assert response.status_code == 422
    spans = wait_until(lambda: collector.trace(trace_id), timeout=10)
    (proposal,) = spans
    assert proposal.parent_span_id == agent_span_id
    assert proposal.attributes["error.type"] == "invalid_arguments"
    assert "gen_ai.tool.call.id" not in proposal.attributes
    assert_no_argument_values(spans)


def test_an_mcp_tools_call_is_one_trace_from_the_meta_traceparent(
    collector: Collector,  # noqa: F811
    live_asgi: LiveAsgi,
    make_agent: Any,
) -> None:
    _, token = make_agent("support-agent", {"emitir_estorno": 3})
    traceparent, trace_id, agent_span_id = agent_traceparent()
    meta = {"traceparent": traceparent, "gatehouse/idempotency_key": "mcp-trace-1", "gatehouse/wait_seconds": 0}
    arguments = {"pedido_id": "PED-00000001", "valor_centavos": 4321, "motivo": "atraso_entrega"}
    request = {"name": "emitir_estorno", "arguments": arguments, "_meta": meta}

    response = rpc(live_asgi.mcp_url, {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": request}, token)

    assert response.status_code == 200, response.text
    call_id = ToolCall.objects.get(idempotency_key="mcp-trace-1").pk
    spans = wait_until(lambda: (found := collector.trace(trace_id)) and len(found) >= 2 and found, timeout=10)
    served = one_named(spans, "tools/call emitir_estorno", "gatehouse-web")
    proposal = one_named(spans, "execute_tool emitir_estorno", "gatehouse-web")
    assert served.parent_span_id == agent_span_id
    assert served.attributes["mcp.method.name"] == "tools/call"
    assert proposal.parent_span_id == served.span_id
    assert proposal.attributes["gen_ai.tool.call.id"] == str(call_id)
    assert_no_argument_values(spans)


def test_an_mcp_requests_traceparent_header_parents_its_spans_when_meta_has_none(
    collector: Collector,  # noqa: F811
    live_asgi: LiveAsgi,
    make_agent: Any,
) -> None:
    _, token = make_agent("support-agent", {"emitir_estorno": 3})
    traceparent, trace_id, agent_span_id = agent_traceparent()
    meta = {"gatehouse/idempotency_key": "mcp-trace-2", "gatehouse/wait_seconds": 0}
    arguments = {"pedido_id": "PED-00000001", "valor_centavos": 4321, "motivo": "atraso_entrega"}
    request = {"name": "emitir_estorno", "arguments": arguments, "_meta": meta}

    response = rpc(
        live_asgi.mcp_url,
        {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": request},
        token,
        traceparent=traceparent,
    )

    assert response.status_code == 200, response.text
    spans = wait_until(lambda: (found := collector.trace(trace_id)) and len(found) >= 2 and found, timeout=10)
    served = one_named(spans, "tools/call emitir_estorno", "gatehouse-web")
    proposal = one_named(spans, "execute_tool emitir_estorno", "gatehouse-web")
    assert served.parent_span_id == agent_span_id
    assert proposal.parent_span_id == served.span_id
    assert_no_argument_values(spans)


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "true"}, False),
    ],
)
def test_tracing_is_on_only_when_the_otel_variables_say_where_spans_go(environ: dict[str, str], on: bool) -> None:
    assert telemetry.wanted(environ) is on


@pytest.mark.parametrize(
    "variable", [("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"), ("OTEL_TRACES_EXPORTER", "zipkin")], ids=str
)
def test_a_process_refuses_to_start_with_an_exporter_it_does_not_ship(variable: tuple[str, str]) -> None:
    name, value = variable
    environ = {**os.environ, name: value, "DJANGO_SETTINGS_MODULE": "config.settings"}

    started = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=BASE_DIR,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert started.returncode != 0
    assert f"{name}={value!r}" in started.stderr


def test_a_json_line_inside_a_traced_proposal_names_its_trace(collector: Collector) -> None:  # noqa: F811
    traceparent, trace_id, _ = agent_traceparent()

    with telemetry.ProposalScope({"traceparent": traceparent}, tool="emitir_estorno", conversation_id=None) as scope:
        scope.called("a-call", "approved", 1)
        record = logging.LogRecord("approvals.test", logging.INFO, __file__, 1, "inside", None, None)
        line = json.loads(telemetry.JsonFormatter().format(record))

    assert line["trace_id"] == trace_id
    assert scope.span is not None
    assert line["span_id"] == format(scope.span.get_span_context().span_id, "016x")
    assert line["call_id"] == "a-call"
