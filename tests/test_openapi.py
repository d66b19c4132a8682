"""schemathesis over the agent API's own OpenAPI document: no 5xx, no undocumented status."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from config.wsgi import application

schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", application)
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture
def token(make_agent, settings_override) -> str:
    _, token = make_agent("support-agent", {"emitir_estorno": 3, "get_order_status": 0})
    return token


@pytest.fixture
def settings_override(settings) -> Iterator[None]:
    # Long-polls would only make the run slow: the contract is the same at 0.1 s.
    settings.GATEHOUSE_MAX_WAIT_SECONDS = 0.1
    # As Django's test client does: requests inside a test transaction must not close its connection.
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    yield
    for signal in (request_started, request_finished):
        signal.connect(close_old_connections)


def test_openapi_document_declares_every_error_code(client) -> None:
    document = client.get("/api/v1/openapi.json").json()
    post = document["paths"]["/api/v1/tool-calls"]["post"]["responses"]
    assert {"200", "201", "202", "400", "401", "403", "404", "409", "413", "422", "429"} <= set(post)


@pytest.mark.django_db
@schema.parametrize()
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_openapi_document(case, token: str) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {token}"}, checks=CHECKS)
