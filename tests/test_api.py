"""The agent API end to end through Django: seed 000's contract suite and every error code."""

from __future__ import annotations

import json

import pytest

from agents.models import Agent
from approvals.models import ToolCall
from audit.models import Event
from audit.sequencer import seal_all
from demo.catalog import MOTIVOS
from tests.conftest import AgentApi, refund
from toolcatalog.models import Tool

pytestmark = pytest.mark.django_db


@pytest.fixture
def support(agent_api) -> AgentApi:
    return agent_api("support-agent", {"emitir_estorno": 3, "get_order_status": 0})


def test_tools_lists_only_granted_tools_in_mcp_shape(agent_api) -> None:
    visitor = agent_api("visitor", {"search_seats": 0})
    tools = visitor.tools().json()["tools"]
    assert [tool["name"] for tool in tools] == ["search_seats"]
    assert set(tools[0]) >= {"name", "description", "inputSchema", "annotations"}
    assert tools[0]["annotations"]["readOnlyHint"] is True


def test_a_motivo_outside_the_enum_is_invalid_arguments_naming_field_and_values(support: AgentApi) -> None:
    response = support.propose(refund(motivo="porque_sim", idempotency_key="k-enum"))
    body = response.json()
    assert response.status_code == 422
    assert body["error"] == "invalid_arguments"
    assert body["errors"] == [
        {"field": "motivo", "problem": "must be one of the accepted values", "accepted_values": MOTIVOS}
    ]


def test_a_refund_of_800000_cents_waits_for_two_approvals_at_tier_3(support: AgentApi) -> None:
    response = support.propose(refund(800000, idempotency_key="k-big"))
    body = response.json()
    assert response.status_code == 202
    assert (body["status"], body["risk_tier"], body["approvals_required"]) == ("pending_approval", 3, 2)
    assert [reason["rule"] for reason in body["risk_reasons"]] == ["above-autonomy", "large-refund"]


@pytest.mark.parametrize(("valor", "tier"), [(20000, 1), (20001, 2), (500000, 2), (500001, 3)])
def test_refund_tier_boundaries_through_the_api(support: AgentApi, valor: int, tier: int) -> None:
    body = support.propose(refund(valor, idempotency_key=f"k-{valor}")).json()
    assert body["risk_tier"] == tier


def test_the_same_call_twice_with_one_key_is_one_tool_call(support: AgentApi) -> None:
    first = support.propose(refund(30000, idempotency_key="k-twice"))
    second = support.propose(refund(30000, idempotency_key="k-twice"))
    assert first.status_code == 202 and second.status_code == 200
    assert second["Idempotent-Replayed"] == "true"
    assert first.json()["id"] == second.json()["id"]
    assert ToolCall.objects.filter(idempotency_key="k-twice").count() == 1


def test_not_granted_and_nonexistent_tools_get_identical_bodies(agent_api) -> None:
    visitor = agent_api("visitor", {"search_seats": 0})
    not_granted = visitor.propose(refund(idempotency_key="k1"))
    nonexistent = visitor.propose({"tool": "no_such_tool", "arguments": {}})
    assert not_granted.status_code == nonexistent.status_code == 404
    assert not_granted.json() == nonexistent.json()
    assert not_granted.json()["error"] == "unknown_or_not_permitted_tool"


def test_a_key_is_derived_from_conversation_step_and_call(support: AgentApi) -> None:
    envelope = {"conversation_id": "conv_51f3", "step": 3, "call_index": 1}
    first = support.propose(refund(**envelope)).json()
    again = support.propose(refund(**envelope)).json()
    assert first["id"] == again["id"]
    assert len(first["idempotency_key"]) == 32
    assert first["arguments"]["idempotency_key"] == first["idempotency_key"]


def test_the_tools_own_idempotency_key_is_filled_from_the_envelope_key(support: AgentApi) -> None:
    body = support.propose(refund(idempotency_key="0123456789abcdef0123456789abcdef")).json()
    assert body["arguments"]["idempotency_key"] == "0123456789abcdef0123456789abcdef"


def test_disagreeing_envelope_and_argument_keys_are_refused(support: AgentApi) -> None:
    proposal = refund(idempotency_key="a" * 32)
    proposal["arguments"]["idempotency_key"] = "b" * 32
    response = support.propose(proposal)
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "idempotency_key"


def test_a_write_without_any_key_is_refused(support: AgentApi) -> None:
    response = support.propose(refund())
    # The refund schema itself requires idempotency_key, so the model learns which field to add.
    assert response.status_code == 422
    assert response.json()["errors"] == [{"field": "idempotency_key", "problem": "is required"}]


def test_a_refused_call_does_not_bind_its_key(support: AgentApi) -> None:
    assert support.propose(refund(motivo="errado", idempotency_key="k-fix")).status_code == 422
    fixed = support.propose(refund(idempotency_key="k-fix"))
    assert fixed.status_code == 201


def test_get_returns_own_calls_and_hides_other_agents_calls(agent_api, support: AgentApi) -> None:
    call_id = support.propose(refund(30000, idempotency_key="k-own")).json()["id"]
    assert support.get(call_id).json()["id"] == call_id
    other = agent_api("other-agent", {"emitir_estorno": 3})
    response = other.get(call_id)
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"
    assert support.get("not-a-uuid").status_code == 404


def test_every_proposal_is_audited_in_the_chain(support: AgentApi) -> None:
    support.propose(refund(30000, idempotency_key="k-audit"))
    support.propose(refund(motivo="x", idempotency_key="k-audit-2"))
    support.propose({"tool": "nope", "arguments": {}})
    seal_all()  # in chain order: sealed, as the sequencer does within a second
    actions = list(Event.objects.order_by("seq").values_list("action", flat=True))
    assert actions[-3:] == ["call.proposed", "call.refused", "call.refused"]


# Every error code of DESIGN.md, with its status and body.


def test_unauthorized_without_a_token_or_with_a_bad_one(support: AgentApi) -> None:
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic abc"}):
        response = support.client.get("/api/v1/tools", headers=headers)
        assert response.status_code == 401
        assert response.json()["error"] == "unauthorized"
        assert response["WWW-Authenticate"].startswith("Bearer")


def test_a_bad_token_is_unauthorized_whatever_the_proposal_body(support: AgentApi) -> None:
    stranger = AgentApi(support.client, "nope")
    bodies = ["{not json", '{"tool": "emitir\\u0000estorno", "arguments": {}}', json.dumps(refund())]
    for raw in bodies:
        response = stranger.propose(None, raw=raw)
        assert response.status_code == 401, raw
        assert response.json()["error"] == "unauthorized"


def test_a_disabled_tool_is_refused_like_an_unknown_one(support: AgentApi) -> None:
    Tool.objects.filter(name="emitir_estorno").update(enabled=False)
    response = support.propose(refund(idempotency_key="k-disabled"))
    assert response.status_code == 404
    assert response.json()["error"] == "unknown_or_not_permitted_tool"
    assert not ToolCall.objects.exists()


def test_an_inactive_agent_is_unauthorized_at_once(support: AgentApi) -> None:
    Agent.objects.update(active=False)
    assert support.tools().status_code == 401


def test_permission_denied_above_the_grant(agent_api) -> None:
    junior = agent_api("junior", {"emitir_estorno": 1})
    response = junior.propose(refund(30000, idempotency_key="k-junior"))
    assert response.status_code == 403
    body = response.json()
    assert (body["error"], body["risk_tier"]) == ("permission_denied", 2)


def test_idempotency_conflict_for_the_same_key_with_other_arguments(support: AgentApi) -> None:
    assert support.propose(refund(30000, idempotency_key="k-c")).status_code == 202
    response = support.propose(refund(30001, idempotency_key="k-c"))
    assert response.status_code == 409
    assert response.json()["error"] == "idempotency_conflict"


def test_the_same_arguments_in_another_key_order_are_a_replay(support: AgentApi) -> None:
    first = support.propose(refund(30000, idempotency_key="k-order"))
    raw = (
        '{"idempotency_key": "k-order", "arguments": {"valor_centavos": 30000, "motivo": "produto_defeituoso", '
        '"pedido_id": "PED-00000001"}, "tool": "emitir_estorno"}'
    )
    again = support.propose(None, raw=raw)
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]


def test_circuit_opens_after_consecutive_failures_of_one_kind(support: AgentApi, settings) -> None:
    settings.GATEHOUSE_BREAKER_THRESHOLD = 3
    for n in range(3):
        assert support.propose(refund(motivo="x", idempotency_key=f"k-b{n}")).status_code == 422
    response = support.propose(refund(idempotency_key="k-b-ok"))
    assert response.status_code == 429
    assert response.json()["error"] == "circuit_open"
    assert Event.objects.filter(action="circuit.opened").count() == 1


def test_a_success_resets_the_failure_count(support: AgentApi, settings) -> None:
    settings.GATEHOUSE_BREAKER_THRESHOLD = 3
    for n in range(2):
        support.propose(refund(motivo="x", idempotency_key=f"k-r{n}"))
    assert support.propose(refund(idempotency_key="k-r-ok")).status_code == 201
    for n in range(2):
        support.propose(refund(motivo="x", idempotency_key=f"k-r2{n}"))
    assert support.propose(refund(idempotency_key="k-r-ok2")).status_code == 201


def test_budget_exhausted_per_conversation(support: AgentApi) -> None:
    Agent.objects.update(max_calls_per_conversation=2)
    for step in range(2):
        assert support.propose(refund(conversation_id="c1", step=step, call_index=0)).status_code == 201
    response = support.propose(refund(conversation_id="c1", step=2, call_index=0))
    assert response.status_code == 429
    assert (response.json()["error"], response.json()["budget"]) == ("budget_exhausted", 2)
    # A replay of a call the budget already paid for still comes back.
    assert support.propose(refund(conversation_id="c1", step=1, call_index=0)).status_code == 200
    assert support.propose(refund(conversation_id="c2", step=0, call_index=0)).status_code == 201


@pytest.mark.parametrize(
    "raw",
    [
        "{not json",
        "[]",
        '"just a string"',
        '{"tool": "emitir_estorno"}',
        '{"tool": "emitir_estorno", "arguments": {}, "surprise": 1}',
        '{"tool": 5, "arguments": {}}',
        '{"tool": "emitir_estorno", "arguments": [1, 2]}',
        '{"tool": "emitir_estorno", "arguments": {}, "step": "3"}',
        '{"tool": "emitir_estorno", "arguments": {"a": NaN}}',
        '{"tool": "emitir_estorno", "arguments": {"a": 1e400}}',
        '{"tool": "emitir_estorno", "tool": "x", "arguments": {}}',
        '{"tool": "emitir_estorno", "arguments": {"a": "\\ud800"}}',
        '{"tool": "emitir\\u0000estorno", "arguments": {}}',
        '{"tool": "emitir_estorno", "arguments": ' + "[" * 100 + "]" * 100 + "}",
        "[" * 100_000 + "]" * 100_000,
        '{"tool": "emitir_estorno", "arguments": {"a": ' + "9" * 5000 + "}}",
        "",
    ],
)
def test_malformed_requests_get_400_with_the_error_body(support: AgentApi, raw: str) -> None:
    response = support.propose(None, raw=raw)
    assert response.status_code == 400, response.content[:300]
    assert response.json()["error"] == "malformed_request"


def test_a_nul_character_in_arguments_is_an_argument_error_naming_the_field(support: AgentApi) -> None:
    raw = (
        '{"tool": "emitir_estorno", "idempotency_key": "k-nul", "arguments": {"motivo": "a\\u0000b", "x": ["\\u0000"]}}'
    )
    response = support.propose(None, raw=raw)
    assert response.status_code == 422
    assert [error["field"] for error in response.json()["errors"]] == ["motivo", "x[0]"]


def test_a_400_digit_number_in_arguments_is_an_argument_error_not_a_crash(support: AgentApi) -> None:
    raw = json.dumps(refund(idempotency_key="k-big-number")).replace("10000", "9" * 400)
    response = support.propose(None, raw=raw)
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "valor_centavos"


def test_bodies_over_one_mebibyte_are_payload_too_large(support: AgentApi) -> None:
    raw = json.dumps(refund(idempotency_key="k-huge", justification="x" * (3 * 1024 * 1024)))
    response = support.propose(None, raw=raw)
    assert response.status_code == 413
    assert response.json()["error"] == "payload_too_large"


def test_dry_run_stores_nothing(support: AgentApi) -> None:
    response = support.propose(refund(30000, idempotency_key="k-dry", dry_run=True))
    body = response.json()
    assert response.status_code == 200
    assert body["dry_run"] is True and body["risk_tier"] == 2 and body["would_require_approval"] is True
    assert set(body["preview"]) >= {"summary", "before", "after"}
    assert not ToolCall.objects.exists()


def test_healthz_reports_database_and_broker(client) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "broker": "ok"}
