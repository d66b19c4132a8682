"""Everything under /api/ answers in the documented error shape, and expected refusals log one quiet line."""

from __future__ import annotations

import json
import logging
import select
from typing import Any

import httpx
import psycopg
import pytest
from django.db import connection
from django.test import Client

from tests.browser import Console
from tests.conftest import AgentApi, refund
from tests.mcp_server import LiveAsgi

pytestmark = pytest.mark.django_db


def _is_error_body(response: Any, code: str) -> bool:
    return response["Content-Type"].startswith("application/json") and response.json()["error"] == code


@pytest.mark.parametrize("debug", [False, True])
def test_a_method_the_endpoint_does_not_take_is_a_json_405_with_allow(debug: bool, settings: Any) -> None:
    settings.DEBUG = debug
    response = Client().get("/api/v1/tool-calls")
    assert response.status_code == 405
    assert _is_error_body(response, "method_not_allowed")
    assert response["Allow"] == "POST"
    assert "POST" in response.json()["message"]


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize("path", ["/api/v1/nope", "/api/", "/api/v2/tool-calls", "/api/v1/tool-calls/x/y"])
def test_an_unknown_api_path_is_a_json_404_even_in_debug_mode(path: str, debug: bool, settings: Any) -> None:
    settings.DEBUG = debug
    response = Client().get(path)
    assert response.status_code == 404
    assert _is_error_body(response, "not_found")
    assert "URL patterns" not in response.content.decode()


@pytest.mark.parametrize("host", ["HdJ,'", "evil.example.com"])
def test_a_host_header_django_refuses_is_a_json_400_on_the_api_and_html_on_the_console(host: str) -> None:
    api = Client().get("/api/v1/tool-calls/0", HTTP_HOST=host)
    console = Client().get("/", HTTP_HOST=host)

    assert api.status_code == console.status_code == 400
    assert _is_error_body(api, "malformed_request")
    assert console["Content-Type"].startswith("text/html")


def test_the_json_errors_the_api_already_gives_are_kept(agent_api: Any) -> None:
    response = agent_api().get("00000000-0000-0000-0000-000000000000")
    assert response.status_code == 404
    assert response.json()["message"] == "No call with that id belongs to this agent."


def test_console_pages_keep_their_html_404(settings: Any) -> None:
    settings.DEBUG = True
    response = Client().get("/no-such-page/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


def test_the_mcp_endpoints_refusals_are_json_too(settings: Any) -> None:
    # /mcp/extra is not the MCP endpoint: Django answers it, under the API's rules.
    settings.DEBUG = True
    response = Client().get("/mcp/extra")
    assert response.status_code == 404
    assert _is_error_body(response, "not_found")


def test_a_post_to_mcp_that_is_not_json_gets_the_error_shape_not_plain_text(
    live_asgi: LiveAsgi, make_agent: Any
) -> None:
    _, token = make_agent("support-agent", {"emitir_estorno": 3})
    message = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "text/plain", "Accept": "application/json"}
    response = httpx.post(live_asgi.mcp_url, content=message, headers=headers)
    assert response.status_code == 400
    assert response.headers["Content-Type"] == "application/json"
    assert response.json()["error"] == "malformed_request"


# Logging: a refusal is an expected outcome, not an incident.


def _records_at_or_above(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.levelno >= level]


# Without a budget to spend, PostgreSQL stores a proposal in one pipelined message, where a taken key aborts it.
@pytest.mark.parametrize("window_budget", [0, 1000])
@pytest.mark.django_db(transaction=True)
def test_a_replay_and_a_conflict_log_one_info_line_and_no_pipeline_warning(
    window_budget: int, agent_api: Any, caplog: pytest.LogCaptureFixture, settings: Any
) -> None:
    settings.GATEHOUSE_AGENT_BUDGET_CALLS = window_budget
    support: AgentApi = agent_api("support-agent", {"emitir_estorno": 3})
    assert support.propose(refund(30000, idempotency_key="k-log")).status_code == 202
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert support.propose(refund(30000, idempotency_key="k-log")).status_code == 200
        assert support.propose(refund(31000, idempotency_key="k-log")).status_code == 409
    assert _records_at_or_above(caplog, logging.WARNING) == []
    assert not [record for record in caplog.records if "pipeline aborted" in record.getMessage()]
    requests = [record for record in caplog.records if record.name == "django.request"]
    assert [(record.levelno, record.getMessage()) for record in requests] == [
        (logging.INFO, "Conflict: /api/v1/tool-calls")
    ]


@pytest.mark.django_db(transaction=True)
def test_a_statement_failing_inside_a_pipeline_is_raised_without_a_pipeline_aborted_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # What a replay's taken key does when its error reaches psycopg before the pipeline ends
    # (under load, every time): the error is raised to the caller, which handles it.
    connection.ensure_connection()
    conn = connection.connection
    with caplog.at_level(logging.INFO), pytest.raises(psycopg.errors.DivisionByZero), conn.pipeline():
        failing, after = conn.cursor(), conn.cursor()
        failing.execute("SELECT 1 / 0")
        select.select([conn.fileno()], [], [], 30)  # the server's answer has arrived…
        after.execute("SELECT 1")  # …so psycopg reads the error here, inside the pipeline
    assert [record.getMessage() for record in caplog.records if record.name == "psycopg"] == []


def test_a_console_403_logs_one_info_line_without_a_traceback(console: Any, caplog: pytest.LogCaptureFixture) -> None:
    mallory: Console = console("mallory")
    with caplog.at_level(logging.INFO):
        assert mallory.get("/audit/").status_code == 403
        assert mallory.get("/").status_code == 403
    requests = [record for record in caplog.records if record.name == "django.request"]
    assert [record.levelno for record in requests] == [logging.INFO, logging.INFO]
    assert all(record.exc_info is None and record.exc_text is None for record in requests)
    assert _records_at_or_above(caplog, logging.WARNING) == []


def test_an_api_403_logs_one_info_line(agent_api: Any, caplog: pytest.LogCaptureFixture) -> None:
    visitor: AgentApi = agent_api("support-agent", {"emitir_estorno": 1})
    with caplog.at_level(logging.INFO):
        assert visitor.propose(refund(800000, idempotency_key="k-too-big")).status_code == 403
    requests = [record for record in caplog.records if record.name == "django.request"]
    assert [(record.levelno, record.getMessage()) for record in requests] == [
        (logging.INFO, "Forbidden: /api/v1/tool-calls")
    ]
    assert _records_at_or_above(caplog, logging.WARNING) == []


def test_a_server_error_still_logs_at_error_with_its_traceback(
    agent_api: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from approvals import api

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(api, "call_body", broken)
    support = agent_api("support-agent", {"emitir_estorno": 3})
    client = Client(raise_request_exception=False)
    support.client = client
    with caplog.at_level(logging.INFO):
        response = support.propose(refund(30000, idempotency_key="k-boom"))
    assert response.status_code == 500
    assert _is_error_body(response, "internal_error")
    errors = [record for record in caplog.records if record.name == "django.request"]
    assert errors and errors[0].levelno == logging.ERROR and errors[0].exc_info is not None
