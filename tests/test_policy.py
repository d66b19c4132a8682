"""The pure decision, table-driven: seed 000's contract cases with no LLM and no database writes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from demo.catalog import MOTIVOS, TIERS, TOOLS
from toolcatalog.policy import TierSpec, compile_policy, evaluate

REFUND = next(spec for spec in TOOLS if spec["name"] == "emitir_estorno")
TIER_SPECS = {
    t["level"]: TierSpec(t["level"], t["name"], t["requires_approval"], t["approvals_required"], t["approval_window"])
    for t in TIERS
}
POLICY = compile_policy(
    name="emitir_estorno",
    version=1,
    base_tier=REFUND["base_tier"],
    input_schema=REFUND["input_schema"],
    rules=[(r["name"], r["description"], r["tier"], r["condition"]) for r in REFUND["rules"]],
    tiers=TIER_SPECS,
)
KEY = "0123456789abcdef0123456789abcdef"


@dataclass
class Grant:
    max_tier: int


def args(valor: int = 10000, **overrides: Any) -> dict[str, Any]:
    base = {"pedido_id": "PED-00000001", "valor_centavos": valor, "motivo": "erro_cobranca", "idempotency_key": KEY}
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


@pytest.mark.parametrize(
    ("valor", "tier", "outcome", "approvals"),
    [
        (1, 1, "approved", 0),
        (20000, 1, "approved", 0),
        (20001, 2, "pending_approval", 1),
        (500000, 2, "pending_approval", 1),
        (500001, 3, "pending_approval", 2),
        (800000, 3, "pending_approval", 2),
        (5000000, 3, "pending_approval", 2),
    ],
)
def test_refund_tier_follows_the_amount(valor: int, tier: int, outcome: str, approvals: int) -> None:
    verdict = evaluate(POLICY, Grant(3), args(valor))
    assert (verdict.risk_tier, verdict.outcome, verdict.approvals_required) == (tier, outcome, approvals)


def test_the_rules_that_fired_are_the_reasons() -> None:
    verdict = evaluate(POLICY, Grant(3), args(800000))
    assert [reason["rule"] for reason in verdict.risk_reasons] == ["above-autonomy", "large-refund"]
    assert evaluate(POLICY, Grant(3), args(100)).risk_reasons == []


def test_a_motivo_outside_the_enum_names_the_field_and_the_accepted_values() -> None:
    verdict = evaluate(POLICY, Grant(3), args(motivo="porque_sim"))
    assert verdict.error_code == "invalid_arguments"
    assert verdict.errors == [
        {"field": "motivo", "problem": "must be one of the accepted values", "accepted_values": MOTIVOS}
    ]


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (args(valor="100"), [{"field": "valor_centavos", "problem": "must be of type integer"}]),
        (args(valor=0), [{"field": "valor_centavos", "problem": "must be greater than or equal to 1"}]),
        (args(valor=5000001), [{"field": "valor_centavos", "problem": "must be less than or equal to 5000000"}]),
        (args(pedido_id="123"), [{"field": "pedido_id", "problem": "must match the pattern ^PED-[0-9]{8}$"}]),
        (args(idempotency_key=None), [{"field": "idempotency_key", "problem": "is required"}]),
    ],
)
def test_each_schema_error_names_its_field(arguments: dict[str, Any], expected: list[dict[str, Any]]) -> None:
    assert evaluate(POLICY, Grant(3), arguments).errors == expected


def test_every_error_is_reported_at_once() -> None:
    verdict = evaluate(POLICY, Grant(3), {"valor_centavos": 1.5, "motivo": "x", "extra": True})
    fields = [error["field"] for error in verdict.errors]
    assert fields == ["extra", "idempotency_key", "motivo", "pedido_id", "valor_centavos"]
    extra = verdict.errors[0]
    assert extra["problem"] == "is not an accepted argument"
    assert "valor_centavos" in extra["accepted_values"]


def test_a_call_above_the_grant_is_permission_denied() -> None:
    verdict = evaluate(POLICY, Grant(2), args(800000))
    assert (verdict.error_code, verdict.risk_tier) == ("permission_denied", 3)


def test_no_grant_is_indistinguishable_from_no_tool() -> None:
    verdict = evaluate(POLICY, None, args())
    assert verdict.error_code == "unknown_or_not_permitted_tool"
    assert verdict.risk_tier is None and verdict.errors == []


def test_evaluate_is_deterministic() -> None:
    first = evaluate(POLICY, Grant(3), args(300000))
    assert all(evaluate(POLICY, Grant(3), args(300000)) == first for _ in range(100))


def test_a_tier_that_needs_no_approval_runs_automatically_whatever_its_level() -> None:
    tiers = {**TIER_SPECS, 2: TierSpec(2, "relaxed", False, 0, timedelta(hours=1))}
    policy = compile_policy(name="t", version=1, base_tier=2, input_schema={"type": "object"}, rules=[], tiers=tiers)
    assert evaluate(policy, Grant(3), {}).outcome == "approved"
