"""Scenario 5: schema validation + risk evaluation per call, validators compiled once per tool version."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bench.stats import Spread

if TYPE_CHECKING:
    from toolcatalog.models import Tool

LOOPS = 20_000
CASES = {
    "tier-2 refund (valid, one rule matches)": {
        "pedido_id": "PED-00000001",
        "valor_centavos": 25000,
        "motivo": "atraso_entrega",
        "idempotency_key": "0123456789abcdef0123456789abcdef",
    },
    "invalid refund (3 field errors)": {
        "pedido_id": "P-1",
        "valor_centavos": -5,
        "motivo": "whim",
        "idempotency_key": "0123456789abcdef0123456789abcdef",
    },
}


@dataclass(frozen=True)
class ValidationResults:
    per_call_us: dict[str, Spread]
    compile_ms: float


def _per_call_us(policy: object, grant: object, arguments: dict[str, object], loops: int) -> float:
    from toolcatalog.policy import evaluate

    started = time.perf_counter()
    for _ in range(loops):
        evaluate(policy, grant, arguments)  # type: ignore[arg-type]
    return (time.perf_counter() - started) / loops * 1e6


def _compile_policy(tool: Tool) -> None:
    """Compile what `policy_for` compiles once per tool version: its input schema and its rules' conditions."""
    from toolcatalog.schema import compile_validator

    compile_validator(tool.input_schema)
    for condition in tool.rules.filter(enabled=True).values_list("condition", flat=True):
        compile_validator(condition)


def measure(runs: int, log: object = print) -> ValidationResults:
    """Time `evaluate()` with the compiled policy of emitir_estorno; also one compilation, for scale."""
    from agents.models import Grant
    from toolcatalog import policies

    grant = Grant.objects.select_related("tool__base_tier").get(
        agent__name="support-agent", tool__name="emitir_estorno"
    )
    policy = policies.policy_for(grant.tool)
    started = time.perf_counter()
    _compile_policy(grant.tool)
    compile_ms = (time.perf_counter() - started) * 1000
    results = {}
    for label, arguments in CASES.items():
        samples = [_per_call_us(policy, grant, arguments, LOOPS) for _ in range(runs)]
        results[label] = Spread.of(samples)
        log(f"  evaluate() {label}: {results[label].format(1)} µs per call")
    return ValidationResults(results, compile_ms)
