"""schemathesis over the agent API's own OpenAPI document: every check, single calls and sequences."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig

from config.wsgi import application

# A schema-valid envelope may still be refused for what it asks (an unknown tool, a
# tier above the grant, arguments the tool's own schema rejects, a reused key, a
# breaker or budget): those documented refusals are accepted answers to valid data.
CONFIG = SchemathesisConfig.from_dict(
    {
        "checks": {
            "positive_data_acceptance": {"expected-statuses": ["2XX", "401", "403", "404", "409", "422", "429"]},
        }
    }
)
schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", application, config=CONFIG)
HYPOTHESIS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture
def token(make_agent, in_process_requests: None) -> str:
    _, token = make_agent("support-agent", {"emitir_estorno": 3, "get_order_status": 0, "search_seats": 0})
    return token


@pytest.fixture
def in_process_requests(settings) -> Iterator[None]:
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
    assert {"200", "201", "202", "400", "401", "403", "404", "409", "413", "422", "429", "503"} <= set(post)


@pytest.mark.django_db
@schema.parametrize()
@HYPOTHESIS
def test_api_conforms_to_its_openapi_document(case, token: str) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {token}"})


@pytest.mark.django_db
def test_sequences_of_calls_conform_to_the_openapi_document(token: str) -> None:
    class Workflow(schema.as_state_machine()):  # type: ignore[misc]
        def get_call_kwargs(self, case: schemathesis.Case) -> dict[str, object]:
            return {"headers": {"Authorization": f"Bearer {token}"}}

    Workflow.run(settings=settings(HYPOTHESIS, max_examples=25, stateful_step_count=6))
