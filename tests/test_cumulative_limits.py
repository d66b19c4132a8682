"""Cumulative limits: a window's total raises the tier, judged atomically with the proposal, across web processes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from approvals.models import ToolCall
from approvals.states import Status
from audit.chain import first_break
from tests.admin_client import AdminBrowser
from tests.conftest import AgentApi, AgentFactory, refund
from tests.test_budgets import WebProcess, propose_at_once
from toolcatalog.models import CumulativeRule, RiskTier, Tool
from toolcatalog.policy import CumulativeSpec, TierGrant, TierSpec, Usage, compile_policy, evaluate

REPETITIONS = 20
CONCURRENT = 20
ONE_THOUSAND_REAIS = 100_000
ONE_HUNDRED_FIFTY = 15_000


def add_limit(name: str = "refunds-per-agent-per-day", **fields: Any) -> CumulativeRule:
    """Add a cumulative limit to the refund tool: R$ 1.000 per 24 h per agent → tier 2, unless told otherwise."""
    values: dict[str, Any] = {
        "sum_argument": "valor_centavos",
        "per": "agent",
        "window": timedelta(hours=24),
        "over": ONE_THOUSAND_REAIS,
        "tier": RiskTier.objects.get(level=2),
        **fields,
    }
    return CumulativeRule.objects.create(tool=Tool.objects.get(name="emitir_estorno"), name=name, **values)


# ------------------------------------------------------------------ the salami test, over real web processes


@pytest.fixture(scope="module", params=["1", "0"], ids=["postgresql-store", "portable-twin"])
def two_web_processes(
    request: pytest.FixtureRequest, django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[str]]:
    """Two web server processes of their own on the test database; yield their base URLs.

    A tool under a limit always takes the store's portable path (one transaction holding the
    limit's lock); both settings are run, as the budget races are.
    """
    servers = [WebProcess(tmp_path_factory.mktemp(f"limits-web-{n}"), request.param) for n in range(2)]
    try:
        yield [server.start().url for server in servers]
    finally:
        for server in servers:
            server.stop()


@pytest.mark.django_db(transaction=True)
def test_salami_twenty_concurrent_refunds_never_slip_under_the_daily_limit_together(
    two_web_processes: list[str], make_agent: AgentFactory
) -> None:
    add_limit()
    for repetition in range(REPETITIONS):
        agent, token = make_agent(f"salami-{repetition}", {"emitir_estorno": 3})
        bodies = [refund(ONE_HUNDRED_FIFTY, idempotency_key=f"s{repetition}-{n}") for n in range(CONCURRENT)]
        results = propose_at_once(two_web_processes, token, bodies)
        assert all(status in (201, 202) for status, _ in results), results
        calls = list(ToolCall.objects.filter(agent=agent))
        approved = [c for c in calls if c.status == Status.APPROVED]
        held = [c for c in calls if c.status != Status.APPROVED]
        assert sum(c.arguments["valor_centavos"] for c in approved) <= ONE_THOUSAND_REAIS, repetition
        # Six R$ 150 refunds fit in R$ 1.000; each of the other fourteen waits for a person at tier 2.
        assert (len(approved), len(held)) == (6, 14), repetition
        assert all(c.status == Status.PENDING_APPROVAL and c.risk_tier == 2 for c in held), repetition
        assert all(c.risk_reasons[-1]["rule"] == "refunds-per-agent-per-day" for c in held)
        assert all(c.risk_tier == 1 and c.risk_reasons == [] for c in approved)
    assert first_break() is None


# ------------------------------------------------------------------ what the window counts


@pytest.fixture
def support(agent_api: Any) -> AgentApi:
    return agent_api()


def test_a_call_that_takes_the_window_over_the_limit_is_raised_and_says_how_much_was_used(support: AgentApi) -> None:
    add_limit()
    for n in range(4):
        assert support.propose(refund(20_000, idempotency_key=f"k{n}")).status_code == 201
    held = support.propose(refund(20_001 - 1, idempotency_key="k4"))
    assert held.status_code == 201  # R$ 1.000 exactly: not over
    over = support.propose(refund(100, idempotency_key="k5"))
    assert (over.status_code, over.json()["status"], over.json()["risk_tier"]) == (202, "pending_approval", 2)
    reason = over.json()["risk_reasons"][0]
    assert (reason["kind"], reason["used"], reason["adding"], reason["over"]) == ("cumulative", 100_000, 100, 100_000)
    assert reason["summary"] == ("R$ 1.000,00 of R$ 1.000,00 used in 24 h by support-agent; this call adds R$ 1,00")


def test_refused_rejected_expired_and_failed_calls_do_not_count(support: AgentApi) -> None:
    add_limit(over=30_000)
    first = support.propose(refund(20_000, idempotency_key="a")).json()
    for status in (Status.REJECTED, Status.EXPIRED, Status.FAILED):
        ToolCall.objects.filter(pk=first["id"]).update(status=status)
        assert support.propose(refund(20_000, idempotency_key=f"b-{status}")).json()["risk_tier"] == 1
        ToolCall.objects.filter(idempotency_key=f"b-{status}").update(status=Status.REFUSED)
    # A pending call counts as much as an approved one.
    ToolCall.objects.filter(pk=first["id"]).update(status=Status.PENDING_APPROVAL)
    assert support.propose(refund(20_000, idempotency_key="c")).json()["risk_tier"] == 2


def test_calls_older_than_the_window_do_not_count(support: AgentApi) -> None:
    add_limit(over=30_000, window=timedelta(hours=1))
    old = support.propose(refund(20_000, idempotency_key="old")).json()
    ToolCall.objects.filter(pk=old["id"]).update(created_at=timezone.now() - timedelta(hours=1, seconds=1))
    assert support.propose(refund(20_000, idempotency_key="new")).json()["risk_tier"] == 1
    assert support.propose(refund(20_000, idempotency_key="newer")).json()["risk_tier"] == 2


def test_a_count_limit_per_resource_counts_each_order_apart_and_any_agent(agent_api: Any) -> None:
    add_limit("two-refunds-per-order", sum_argument="", per="resource", over=2, window=timedelta(hours=1))
    first, second = agent_api("one"), agent_api("two")
    assert first.propose(refund(100, idempotency_key="1", pedido="PED-00000001")).json()["risk_tier"] == 1
    assert second.propose(refund(100, idempotency_key="2", pedido="PED-00000001")).json()["risk_tier"] == 1
    assert first.propose(refund(100, idempotency_key="3", pedido="PED-00000002")).json()["risk_tier"] == 1
    third = second.propose(refund(100, idempotency_key="4", pedido="PED-00000001")).json()
    assert third["risk_tier"] == 2
    assert (
        third["risk_reasons"][0]["summary"] == "2 of 2 calls made in 1 h on pedido_id PED-00000001; this call makes 3"
    )


def test_a_limit_that_raises_a_call_above_the_agents_grant_refuses_it_and_stores_nothing_approved(
    agent_api: Any,
) -> None:
    add_limit(over=30_000)
    capped = agent_api("capped", {"emitir_estorno": 1})
    assert capped.propose(refund(20_000, idempotency_key="x")).status_code == 201
    refused = capped.propose(refund(20_000, idempotency_key="y"))
    assert (refused.status_code, refused.json()["error"]) == (403, "permission_denied")
    assert ToolCall.objects.filter(status=Status.REFUSED).count() == 1
    # The refusal did not bind the key: the same key with a smaller amount is accepted.
    assert capped.propose(refund(5_000, idempotency_key="y")).status_code == 201


def test_a_replay_under_a_limit_is_the_same_call(support: AgentApi) -> None:
    add_limit(over=30_000)
    first = support.propose(refund(20_000, idempotency_key="same"))
    again = support.propose(refund(20_000, idempotency_key="same"))
    assert (again.status_code, again.json()["id"]) == (200, first.json()["id"])
    assert ToolCall.objects.count() == 1


def test_a_disabled_limit_raises_nothing(support: AgentApi) -> None:
    add_limit(over=0, enabled=False)
    assert support.propose(refund(20_000, idempotency_key="z")).json()["risk_tier"] == 1


def test_the_call_page_shows_how_much_of_the_limit_was_used(support: AgentApi, django_user_model: type[User]) -> None:
    add_limit(over=20_000)
    support.propose(refund(15_000, idempotency_key="p1"))
    held = support.propose(refund(15_000, idempotency_key="p2")).json()
    reviewer = django_user_model.objects.create_superuser("rita", "rita@example.com", "pw")
    client = Client()
    client.force_login(reviewer)
    page = client.get(f"/calls/{held['id']}/").content.decode()
    assert "R$ 150,00 of R$ 200,00 used in 24 h by support-agent; this call adds R$ 150,00" in page
    assert "refunds-per-agent-per-day" in page


# ------------------------------------------------------------------ the pure decision


TIERS = {level: TierSpec(level, str(level), level >= 2, max(0, level - 1), timedelta(hours=1)) for level in range(4)}
LIMIT = CumulativeSpec("daily", "", 2, "valor_centavos", "agent", timedelta(hours=24), 1000)
POLICY = compile_policy(
    name="t", version=1, base_tier=1, input_schema={"type": "object"}, rules=[], tiers=TIERS, cumulative=[LIMIT]
)


@pytest.mark.parametrize(
    ("used", "amount", "tier"),
    [(0, 1000, 1), (999, 1, 1), (999, 2, 2), (1000, 1, 2), (5000, 0, 2)],
)
def test_evaluate_raises_the_tier_only_when_the_call_takes_the_total_over(used: int, amount: int, tier: int) -> None:
    verdict = evaluate(POLICY, TierGrant(3), {"valor_centavos": amount}, {"daily": Usage(used, "bot")})
    assert verdict.risk_tier == tier


def test_evaluate_without_usage_judges_no_limit() -> None:
    assert evaluate(POLICY, TierGrant(3), {"valor_centavos": 10**6}).risk_tier == 1


# ------------------------------------------------------------------ the admin: inline, try-arguments, what-if


def test_the_admin_inline_adds_a_limit_and_refuses_one_it_could_not_count(catalog: dict[str, Tool]) -> None:
    admin = AdminBrowser()
    tool = catalog["emitir_estorno"]
    url = f"/admin/toolcatalog/tool/{tool.pk}/change/"
    version = tool.version
    limit = {
        "cumulative_rules-TOTAL_FORMS": "1",
        "cumulative_rules-0-name": "daily",
        "cumulative_rules-0-sum_argument": "motivo",
        "cumulative_rules-0-per": "agent",
        "cumulative_rules-0-window": "24:00:00",
        "cumulative_rules-0-over": "100000",
        "cumulative_rules-0-tier": str(RiskTier.objects.get(level=2).pk),
        "cumulative_rules-0-enabled": "on",
    }
    refused = admin.submit(url, limit)
    assert refused.status_code == 200
    assert "is not a number argument of emitir_estorno" in refused.content.decode()
    saved = admin.submit(url, {**limit, "cumulative_rules-0-sum_argument": "valor_centavos"})
    assert saved.status_code == 302
    rule = CumulativeRule.objects.get(tool=tool)
    assert (rule.sum_argument, rule.window, rule.over) == ("valor_centavos", timedelta(hours=24), 100000)
    tool.refresh_from_db()
    assert tool.version > version  # a new policy: pending calls are judged again


def test_the_try_box_judges_with_the_agents_window_as_it_stands(support: AgentApi) -> None:
    add_limit(over=30_000)
    support.propose(refund(20_000, idempotency_key="t1"))
    tool = Tool.objects.get(name="emitir_estorno")
    admin = AdminBrowser()
    arguments = {
        "pedido_id": "PED-00000001",
        "valor_centavos": 20_000,
        "motivo": "erro_cobranca",
        "idempotency_key": "a" * 32,
    }
    url = f"/admin/toolcatalog/tool/{tool.pk}/try/"
    judged = admin.post(url, {"arguments": json.dumps(arguments), "max_tier": 3, "agent": "support-agent"})
    assert judged.context["verdict"].risk_tier == 2
    assert "R$ 200,00 of R$ 300,00 used in 24 h by support-agent; this call adds R$ 200,00" in judged.content.decode()
    # Without an agent, the limit per agent is left out.
    assert admin.post(url, {"arguments": json.dumps(arguments), "max_tier": 3}).context["verdict"].risk_tier == 1


def test_what_if_replays_a_saved_limit_over_the_calls_windows(support: AgentApi) -> None:
    for n in range(5):
        assert support.propose(refund(15_000, idempotency_key=f"w{n}")).json()["risk_tier"] == 1
    add_limit(over=40_000)
    tool = Tool.objects.get(name="emitir_estorno")
    response = AdminBrowser().submit(f"/admin/toolcatalog/tool/{tool.pk}/whatif/", {})
    report = response.context["report"]
    # The first two fit in R$ 400; the next three would each have waited for a person.
    assert report.changed_count == 3
    assert {(c.tier_before, c.tier_after) for c in report.changed} == {(1, 2)}
    assert {tuple(c.rules_after) for c in report.changed} == {("refunds-per-agent-per-day",)}


def test_a_dry_run_reads_the_window_as_it_stands_and_spends_nothing(support: AgentApi) -> None:
    add_limit(over=30_000)
    support.propose(refund(20_000, idempotency_key="d1"))
    preview = support.propose(refund(20_000, idempotency_key="d2", dry_run=True)).json()
    assert (preview["risk_tier"], preview["would_require_approval"]) == (2, True)
    assert ToolCall.objects.count() == 1
