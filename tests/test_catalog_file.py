"""Policy as code: `catalog export` and `catalog apply FILE [--plan]`."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.core.management.base import CommandError

from approvals.models import ToolCall
from audit.models import Event
from tests.browser import propose_refund as propose
from tests.conftest import AgentApi
from toolcatalog.models import ApproverGroup, CumulativeRule, RiskRule, RiskTier, Tool

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command("catalog", *args, stdout=out, stderr=out)
    return out.getvalue()


def versions() -> dict[str, int]:
    return dict(Tool.objects.values_list("name", "version"))


@pytest.fixture
def governed(catalog: dict[str, Any]) -> Tool:
    """The refund tool with every kind of rule and an approver group, so an export holds each."""
    refunds = Tool.objects.get(name="emitir_estorno")
    finance = Group.objects.create(name="finance")
    ApproverGroup.objects.create(tool=refunds, min_tier=2, group=finance)
    CumulativeRule.objects.create(
        tool=refunds,
        name="refunds-per-agent-per-day",
        sum_argument="valor_centavos",
        per="agent",
        window=timedelta(hours=24),
        over=100000,
        tier=RiskTier.objects.get(level=2),
    )
    refunds.refresh_from_db()
    return refunds


def edited(path: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    document = yaml.safe_load(path.read_text())
    change(document)
    out = path.with_name("edited.yaml")
    out.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    return out


def refunds_of(document: dict[str, Any]) -> dict[str, Any]:
    return next(tool for tool in document["tools"] if tool["name"] == "emitir_estorno")


@pytest.mark.parametrize("file_format", ["yaml", "json"])
def test_export_then_apply_of_the_same_file_changes_nothing(governed: Tool, tmp_path: Path, file_format: str) -> None:
    path = tmp_path / f"catalog.{file_format}"
    run("export", "--format", file_format, "--out", str(path))
    text = path.read_text()
    document = json.loads(text) if file_format == "json" else yaml.safe_load(text)
    kinds = {rule["kind"] for rule in refunds_of(document)["rules"]}
    assert kinds == {"arguments", "cumulative"} and refunds_of(document)["approver_groups"] == [
        {"tier": 2, "group": "finance"}
    ]
    before, events = versions(), Event.objects.count()
    assert "No changes: the catalog already matches" in run("apply", str(path), "--plan")
    assert "No changes: the catalog already matches" in run("apply", str(path))
    assert versions() == before and Event.objects.count() == events


def test_apply_makes_the_catalog_match_in_one_audited_change(governed: Tool, tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    run("export", "--out", str(path))
    Group.objects.create(name="risk")

    def change(document: dict[str, Any]) -> None:
        refunds = refunds_of(document)
        refunds["rules"] = [r for r in refunds["rules"] if r["name"] != "large-refund"]
        refunds["rules"].append(
            {"name": "holds", "kind": "cumulative", "count": True, "per": "tool", "window": "1h", "over": 30, "tier": 2}
        )
        refunds["approver_groups"].append({"tier": 3, "group": "risk"})
        document["tiers"][2]["approval_window"] = "6h"

    before, events = versions(), Event.objects.count()
    last_id = Event.objects.order_by("-id").values_list("id", flat=True).first() or 0
    out = run("apply", str(edited(path, change)))
    assert "Applied 4 change(s)" in out and "rule large-refund removed" in out
    after = versions()
    assert after["emitir_estorno"] == before["emitir_estorno"] + 1  # one new version for the whole change
    assert {name: v for name, v in after.items() if name != "emitir_estorno"} == {
        name: v for name, v in before.items() if name != "emitir_estorno"
    }
    (applied,) = Event.objects.filter(id__gt=last_id, action="catalog.applied")
    assert len(applied.data["changes"]) == 4 and Event.objects.count() == events + 1
    assert not RiskRule.objects.filter(tool=governed, name="large-refund").exists()
    holds = CumulativeRule.objects.get(tool=governed, name="holds")
    assert (holds.sum_argument, holds.per, holds.window, holds.over) == ("", "tool", timedelta(hours=1), 30)
    assert set(ApproverGroup.objects.filter(tool=governed).values_list("min_tier", "group__name")) == {
        (2, "finance"),
        (3, "risk"),
    }
    assert RiskTier.objects.get(level=2).approval_window == timedelta(hours=6)


def test_a_change_of_approver_groups_alone_makes_no_new_version(governed: Tool, tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    run("export", "--out", str(path))
    before = versions()
    run("apply", str(edited(path, lambda document: refunds_of(document).update(approver_groups=[]))))
    assert versions() == before and not ApproverGroup.objects.filter(tool=governed).exists()


def test_an_invalid_file_is_refused_whole_with_every_problem_listed(governed: Tool, tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    run("export", "--out", str(path))

    def change(document: dict[str, Any]) -> None:
        document["tiers"][2]["name"] = "renamed"  # a valid change: not applied either
        refunds = refunds_of(document)
        refunds["rules"] = [
            {"name": "a", "kind": "cumulative", "per": "planet", "window": "24 hours", "over": 1, "tier": 2},
            {"name": "b", "kind": "arguments", "condition": {"type": "nope"}, "tier": 2},
            {"name": "c", "kind": "cumulative", "sum": "nope", "per": "agent", "window": "1h", "over": 1, "tier": 2},
            {"name": "d", "kind": "sliding", "tier": 2},
        ]
        refunds["approver_groups"] = [{"tier": 2, "group": "ghosts"}]
        document["tools"].append({"name": "no_such_tool", "tier": 1})

    before, events = versions(), Event.objects.count()
    out = StringIO()
    with pytest.raises(CommandError, match="refused, nothing changed: 8 problem"):
        call_command("catalog", "apply", str(edited(path, change)), stdout=out, stderr=out)
    listed = out.getvalue()
    at = f"tools[{[t['name'] for t in yaml.safe_load(path.read_text())['tools']].index('emitir_estorno')}]"
    for problem in (
        f"{at}.rules[0].per: must be one of the accepted values (accepted: agent, resource, tool)",
        f"{at}.rules[0].window: must match the pattern",
        f"{at}.rules[0]: give either `sum: ARGUMENT` or `count: true`",
        f"{at}.rules[1].condition: at type: unknown type 'nope'",
        f"{at}.rules[2].sum: “emitir_estorno” takes no argument 'nope'",
        f"{at}.rules[3].kind: must be one of the accepted values (accepted: arguments, cumulative)",
        f"{at}.approver_groups[0].group: no group named 'ghosts'",
        "no tool named 'no_such_tool'",
    ):
        assert problem in listed, listed
    assert versions() == before and Event.objects.count() == events
    assert RiskTier.objects.get(level=2).name != "renamed"


def test_a_plan_of_a_stricter_cumulative_rule_lists_the_past_calls_it_would_have_held(
    governed: Tool, support: AgentApi, tmp_path: Path
) -> None:
    governed.cumulative_rules.all().delete()
    calls = [propose(support, 15000, f"plan-{n}") for n in range(5)]  # R$ 150 each: under autonomy, all run
    assert all(call.risk_tier == 1 for call in calls)
    path = tmp_path / "catalog.yaml"
    run("export", "--out", str(path))
    stricter = {
        "name": "per-day",
        "kind": "cumulative",
        "sum": "valor_centavos",
        "per": "agent",
        "window": "24h",
        "over": 40000,
        "tier": 2,
    }
    plan = run("apply", str(edited(path, lambda d: refunds_of(d)["rules"].append(stricter))), "--plan")
    assert "rule per-day added" in plan
    assert (
        "What-if for emitir_estorno over the last 30 days: 5 call(s) replayed, 3 would be judged differently." in plan
    )
    held = [line for line in plan.splitlines() if "runs without approval → needs approval (per-day)" in line]
    assert [line.split()[2] for line in held] == [str(call.pk) for call in calls[2:]]  # the 3rd takes it to 450
    assert not governed.cumulative_rules.exists() and ToolCall.objects.count() == 5
