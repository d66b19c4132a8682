"""Policy what-if: stored calls replayed against current or edited rules, counts per tier before → after."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from agents.models import Agent, Grant
from approvals.models import ToolCall
from audit.canonical import canonical_hash as arguments_hash
from demo.catalog import MOTIVOS
from tests.admin_client import AdminBrowser
from toolcatalog.models import RiskRule, RiskTier, Tool

AMOUNTS = [10000, 30000, 600000]  # tier 1, 2 and 3 under the demo rules
DAYS_AGO = 3


def amount_of(i: int) -> int:
    """Half the calls are small, three tenths need one reviewer, a fifth need two."""
    return AMOUNTS[0] if i % 10 < 5 else AMOUNTS[1] if i % 10 < 8 else AMOUNTS[2]


def store_calls(agent: Agent, tool: Tool, count: int, *, days_ago: float = DAYS_AGO, start: int = 0) -> None:
    """Store `count` refund calls as the pipeline would have judged them under the demo rules."""
    created = timezone.now() - timedelta(days=days_ago)
    calls = []
    for i in range(start, start + count):
        arguments = {
            "pedido_id": f"PED-{i:08d}",
            "valor_centavos": amount_of(i),
            "motivo": MOTIVOS[i % 4],
            "idempotency_key": f"{i:032x}",
        }
        tier = AMOUNTS.index(amount_of(i)) + 1
        calls.append(
            ToolCall(
                agent=agent,
                tool=tool,
                tool_version=tool.version,
                arguments=arguments,
                arguments_hash=arguments_hash(arguments),
                request_hash="",
                idempotency_key=f"k-{i}",
                status="succeeded" if tier == 1 else "pending_approval",
                risk_tier=tier,
                approvals_required=tier - 1,
                created_at=created + timedelta(seconds=i),
            )
        )
    ToolCall.objects.bulk_create(calls, batch_size=500)


def store_invalid_calls(agent: Agent, tool: Tool, count: int) -> None:
    """Store calls the pipeline refused for invalid arguments (they have no tier)."""
    ToolCall.objects.bulk_create(
        ToolCall(
            agent=agent,
            tool=tool,
            tool_version=tool.version,
            arguments={"pedido_id": "nope", "valor_centavos": 0},
            arguments_hash=arguments_hash({"pedido_id": "nope", "valor_centavos": 0}),
            request_hash="",
            status="refused",
            created_at=timezone.now() - timedelta(days=1),
        )
        for _ in range(count)
    )


@pytest.fixture
def admin(db: None) -> AdminBrowser:
    return AdminBrowser()


@pytest.fixture
def stored(make_agent: Any, catalog: dict[str, Tool]) -> tuple[Agent, Tool]:
    """1,000 stored calls of emitir_estorno (500 tier 1, 300 tier 2, 200 tier 3) and 10 refused ones."""
    agent, _ = make_agent("support-agent", {"emitir_estorno": 3})
    tool = catalog["emitir_estorno"]
    store_calls(agent, tool, 1000)
    store_invalid_calls(agent, tool, 10)
    return agent, tool


def whatif_url(tool: Tool) -> str:
    return f"/admin/toolcatalog/tool/{tool.pk}/whatif/"


def replay(admin: AdminBrowser, tool: Tool, **changes: Any) -> dict[str, Any]:
    """Submit the what-if form (its initial values are the current rules) with `changes`; return the page's counts."""
    response = admin.submit(whatif_url(tool), {k: v for k, v in changes.items()})
    assert response.status_code == 200
    assert response.context["report"] is not None, response.context["form"].errors
    page = response.content.decode()
    tiers = re.findall(r'<tr data-tier="(\w+)" data-before="(\d+)" data-after="(\d+)">', page)
    outcomes = re.findall(r'<tr data-outcome="([\w ]+)" data-before="(\d+)" data-after="(\d+)">', page)
    return {
        "before": {t: int(b) for t, b, _ in tiers},
        "after": {t: int(a) for t, _, a in tiers},
        "outcomes_after": {o: int(a) for o, _, a in outcomes},
        "changed": int(re.search(r'id="changed-count" data-count="(\d+)"', page).group(1)),
        "listed": len(re.findall(r'class="changed-call"', page)),
        "report": response.context["report"],
    }


def current_rules(tool: Tool) -> list[dict[str, Any]]:
    return [
        {"name": r.name, "description": r.description, "condition": r.condition, "tier": r.tier.level}
        for r in tool.rules.select_related("tier").order_by("name")
    ]


BEFORE = {"1": 500, "2": 300, "3": 200, "none": 10}


def test_replaying_the_current_rules_changes_nothing(admin: AdminBrowser, stored: tuple[Agent, Tool]) -> None:
    _, tool = stored
    result = replay(admin, tool)
    assert result["before"] == BEFORE
    assert result["after"] == BEFORE
    assert result["changed"] == 0
    assert result["outcomes_after"] == {"runs without approval": 500, "needs approval": 500, "refused": 10}


def test_edited_rules_are_replayed_without_being_saved(admin: AdminBrowser, stored: tuple[Agent, Tool]) -> None:
    _, tool = stored
    rules = current_rules(tool)
    rules[0]["condition"] = {"properties": {"valor_centavos": {"minimum": 50001}}, "required": ["valor_centavos"]}
    result = replay(admin, tool, rules=json.dumps(rules))
    assert result["before"] == BEFORE
    assert result["after"] == {"1": 800, "2": 0, "3": 200, "none": 10}
    assert result["changed"] == 300
    assert result["listed"] == 200  # the page lists the first 200 and counts them all
    assert result["outcomes_after"] == {"runs without approval": 800, "needs approval": 200, "refused": 10}
    first = result["report"].changed[0]
    assert (first.tier_before, first.tier_after, first.outcome_after) == (2, 1, "runs without approval")
    assert RiskRule.objects.get(tool=tool, name="above-autonomy").condition["properties"]["valor_centavos"] == {
        "minimum": 20001
    }
    assert Tool.objects.get(pk=tool.pk).version == tool.version


def test_after_a_saved_rule_change_the_current_rules_replay_differently(
    admin: AdminBrowser, stored: tuple[Agent, Tool]
) -> None:
    agent, tool = stored
    RiskRule.objects.create(
        tool=tool,
        name="billing-errors",
        condition={"properties": {"motivo": {"const": "erro_cobranca"}}, "required": ["motivo"]},
        tier=RiskTier.objects.get(level=3),
    )
    Grant.objects.filter(agent=agent, tool=tool).update(max_tier=2)
    expected = {"1": 0, "2": 0, "3": 0, "none": 10}
    refused = 10
    for i in range(1000):  # an oracle that does not use evaluate(): the rules, by hand
        amount, motivo = amount_of(i), MOTIVOS[i % 4]
        tier = max(1, 2 if amount > 20000 else 1, 3 if amount > 500000 or motivo == "erro_cobranca" else 1)
        expected[str(tier)] += 1
        refused += tier > 2  # above the agent's grant now
    result = replay(admin, tool)
    assert result["before"] == BEFORE
    assert result["after"] == expected == {"1": 400, "2": 200, "3": 400, "none": 10}
    assert result["outcomes_after"] == {"runs without approval": 400, "needs approval": 200, "refused": refused}
    assert result["changed"] == 200 + 200  # 200 raised to tier 3, and the 200 tier-3 calls now over the grant


def test_only_calls_of_the_last_n_days_are_replayed(admin: AdminBrowser, stored: tuple[Agent, Tool]) -> None:
    agent, tool = stored
    store_calls(agent, tool, 20, days_ago=40, start=5000)
    assert sum(replay(admin, tool, days=30)["before"].values()) == 1010
    assert sum(replay(admin, tool, days=60)["before"].values()) == 1030


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        ('[{"name": "x", "tier": 2, "condition": {"properties": {"motivo": {"pattern": "(a"}}}}]', "invalid regular"),
        ('[{"name": "x", "tier": 7, "condition": {}}]', '"tier" must be one of'),
        ('[{"name": "x", "tier": 2, "condition": {"$ref": "https://example.com/r.json"}}]', "remote reference"),
        ('{"name": "x"}', "a JSON list"),
    ],
)
def test_bad_edited_rules_get_a_field_error(
    admin: AdminBrowser, stored: tuple[Agent, Tool], rules: str, expected: str
) -> None:
    _, tool = stored
    response = admin.submit(whatif_url(tool), {"rules": rules})
    assert response.context["report"] is None
    assert expected in " ".join(response.context["form"].errors["rules"])


def test_the_whatif_command_replays_from_a_shell(stored: tuple[Agent, Tool], tmp_path: Any) -> None:
    from io import StringIO

    from django.core.management import call_command

    _, tool = stored
    rules = current_rules(tool)
    rules[0]["condition"] = {"properties": {"valor_centavos": {"minimum": 50001}}, "required": ["valor_centavos"]}
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(rules))
    out = StringIO()
    call_command("policy_whatif", "emitir_estorno", "--rules", str(path), stdout=out)
    text = out.getvalue()
    assert "1010 calls replayed" in text and "300 would change" in text
    assert re.search(r"tier +2: +300 → 0", text)
