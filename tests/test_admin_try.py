"""The try-arguments box judges pasted arguments exactly as the agent API does."""

from __future__ import annotations

import json
import re
import string
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from demo.catalog import MOTIVOS
from tests.admin_client import AdminBrowser
from tests.conftest import AgentApi
from toolcatalog.models import Tool

# A value JSON (and jsonb) can carry: no NUL, no lone surrogates.
TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=12)
SCALARS = st.none() | st.booleans() | st.integers(-(10**12), 10**12) | st.floats(-1e9, 1e9) | TEXT

# Each argument of seed 000's emitir_estorno schema: (valid values, invalid values).
REFUND_FIELDS: dict[str, tuple[st.SearchStrategy[Any], st.SearchStrategy[Any]]] = {
    "pedido_id": (
        st.from_regex(r"PED-[0-9]{8}", fullmatch=True),
        st.one_of(TEXT, st.integers(), st.from_regex(r"PED-[0-9]{1,7}", fullmatch=True), st.just("ped-00000001")),
    ),
    "valor_centavos": (
        # The rule thresholds (R$ 200 and R$ 5.000) and their neighbours, and every tier's range.
        st.one_of(
            st.sampled_from([1, 20000, 20001, 500000, 500001, 5000000]),
            st.integers(1, 20000),
            st.integers(20001, 500000),
            st.integers(500001, 5_000_000),
        ),
        st.one_of(
            st.integers(-1000, 0),
            st.integers(5_000_001, 10**12),
            st.floats(1.5, 1e6),
            st.just("30000"),
            st.booleans(),
        ),
    ),
    "motivo": (st.sampled_from(MOTIVOS), st.one_of(TEXT, st.just("PRODUTO_DEFEITUOSO"), st.integers())),
    "idempotency_key": (
        st.text("0123456789abcdef", min_size=32, max_size=32),
        st.one_of(st.text(string.ascii_uppercase, min_size=32, max_size=32), TEXT, st.integers()),
    ),
}


TIER_EXAMPLE = {"pedido_id": "PED-00000001", "motivo": "erro_cobranca", "idempotency_key": "a" * 32}


@st.composite
def refund_arguments(draw: st.DrawFn) -> dict[str, Any]:
    """Arguments for emitir_estorno: mostly valid fields, some invalid, some missing, sometimes an extra one."""
    arguments: dict[str, Any] = {}
    for name, (valid, invalid) in REFUND_FIELDS.items():
        kind = draw(st.sampled_from(["valid"] * 6 + ["invalid", "missing"]))
        if kind != "missing":
            arguments[name] = draw(valid if kind == "valid" else invalid)
    if draw(st.integers(0, 9)) == 0:
        arguments[draw(st.from_regex(r"[a-z_]{1,12}", fullmatch=True))] = draw(SCALARS)
    return arguments


def try_in_admin(admin: AdminBrowser, tool: Tool, arguments: Any, max_tier: int = 3) -> dict[str, Any]:
    """POST arguments to the try box; return what the page shows: tier, rules fired, errors."""
    response = admin.post(
        f"/admin/toolcatalog/tool/{tool.pk}/try/", {"arguments": json.dumps(arguments), "max_tier": max_tier}
    )
    assert response.status_code == 200
    verdict = response.context["verdict"]
    assert verdict is not None, response.context["form"].errors
    page = response.content.decode()
    shown = {
        "tier": int(t) if (t := re.search(r'data-tier="(\d*)"', page).group(1)) else None,
        "rules": re.findall(r'<li data-rule="([^"]+)"', page),
        "errors": [
            {"field": f, "problem": p} for f, p in re.findall(r'data-field="([^"]*)" data-problem="([^"]*)"', page)
        ],
        "error_code": re.search(r'data-error="([^"]*)"', page).group(1) or None,
    }
    # What the page shows is what evaluate() said.
    assert shown["tier"] == verdict.risk_tier
    assert shown["rules"] == [reason["rule"] for reason in verdict.risk_reasons]
    assert len(shown["errors"]) == len(verdict.errors)
    return {**shown, "errors": verdict.errors}


def judge_by_api(api: AgentApi, arguments: dict[str, Any]) -> dict[str, Any]:
    """Ask the agent API (dry run: nothing stored or executed) how it judges the arguments."""
    response = api.propose({"tool": "emitir_estorno", "arguments": arguments, "dry_run": True})
    body = response.json()
    if response.status_code == 200:
        return {"tier": body["risk_tier"], "rules": [r["rule"] for r in body["risk_reasons"]], "errors": []}
    assert response.status_code == 422, body
    assert body["error"] == "invalid_arguments"
    return {"tier": None, "rules": [], "errors": body["errors"]}


@pytest.fixture
def admin(db: None) -> AdminBrowser:
    return AdminBrowser()


def test_try_shows_the_tier_and_the_rules_that_fired(admin: AdminBrowser, catalog: dict[str, Tool]) -> None:
    tool = catalog["emitir_estorno"]
    arguments = {"pedido_id": "PED-00000001", "valor_centavos": 600000, "motivo": "erro_cobranca"}
    shown = try_in_admin(admin, tool, {**arguments, "idempotency_key": "a" * 32})
    assert (shown["tier"], shown["rules"]) == (3, ["above-autonomy", "large-refund"])
    shown = try_in_admin(admin, tool, {**arguments, "idempotency_key": "a" * 32}, max_tier=2)
    assert shown["error_code"] == "permission_denied"


def test_try_shows_every_validation_error(admin: AdminBrowser, catalog: dict[str, Tool]) -> None:
    shown = try_in_admin(admin, catalog["emitir_estorno"], {"pedido_id": "PED-1", "valor_centavos": 0, "x": 1})
    assert shown["error_code"] == "invalid_arguments"
    assert [e["field"] for e in shown["errors"]] == ["idempotency_key", "motivo", "pedido_id", "valor_centavos", "x"]
    assert shown["tier"] is None


def test_try_refuses_text_that_is_not_json(admin: AdminBrowser, catalog: dict[str, Tool]) -> None:
    tool = catalog["emitir_estorno"]
    response = admin.post(f"/admin/toolcatalog/tool/{tool.pk}/try/", {"arguments": "{'a': 1", "max_tier": 3})
    assert response.status_code == 200
    assert response.context["verdict"] is None
    assert "arguments" in response.context["form"].errors


def test_the_try_box_is_on_the_tool_page(admin: AdminBrowser, catalog: dict[str, Tool]) -> None:
    tool = catalog["emitir_estorno"]
    page = admin.get(f"/admin/toolcatalog/tool/{tool.pk}/change/").content.decode()
    assert f'action="/admin/toolcatalog/tool/{tool.pk}/try/"' in page
    assert f'href="/admin/toolcatalog/tool/{tool.pk}/whatif/"' in page


def test_try_agrees_with_the_api_on_50_generated_argument_sets(
    admin: AdminBrowser, catalog: dict[str, Tool], agent_api: Any, settings: Any
) -> None:
    # Dry runs ask the demo services for a preview: point them at a closed port so they fail fast.
    settings.GATEHOUSE_DEMO_SERVICES_URL = "http://127.0.0.1:9"
    api = agent_api("support-agent", {"emitir_estorno": 3})
    tool = catalog["emitir_estorno"]
    seen = {"valid": 0, "invalid": 0, "tiers": set()}

    @settings_for_db
    @given(arguments=refund_arguments())
    # One of each tier for sure: which cases the generator reaches may change with the code it runs.
    @example(arguments={**TIER_EXAMPLE, "valor_centavos": 20000})
    @example(arguments={**TIER_EXAMPLE, "valor_centavos": 20001})
    @example(arguments={**TIER_EXAMPLE, "valor_centavos": 500001})
    def agree(arguments: dict[str, Any]) -> None:
        by_api, in_admin = judge_by_api(api, arguments), try_in_admin(admin, tool, arguments)
        assert (in_admin["tier"], in_admin["rules"], in_admin["errors"]) == (
            by_api["tier"],
            by_api["rules"],
            by_api["errors"],
        )
        seen["invalid" if by_api["errors"] else "valid"] += 1
        seen["tiers"].add(by_api["tier"])

    agree()
    assert seen["valid"] + seen["invalid"] == 50 + 3
    assert seen["valid"] >= 5 and seen["invalid"] >= 5, seen
    assert seen["tiers"] == {None, 1, 2, 3}, seen


settings_for_db = hypothesis_settings(
    max_examples=50,
    deadline=None,
    derandomize=True,  # the same 50 cases on every run: a CI failure can be replayed
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
