"""The operator's management commands."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from agents.models import Agent, Grant, hash_token
from toolcatalog.models import RiskRule, RiskTier, Tool

pytestmark = pytest.mark.django_db


def run(*args: str, **options: object) -> str:
    out = StringIO()
    call_command(*args, stdout=out, **options)
    return out.getvalue()


def test_seed_demo_is_idempotent(tmp_path) -> None:
    tokens = tmp_path / "tokens.json"
    run("seed_demo", "--password", "pw-123456", "--tokens-file", str(tokens))
    versions = dict(Tool.objects.values_list("name", "version"))
    counts = (Tool.objects.count(), RiskRule.objects.count(), RiskTier.objects.count(), Agent.objects.count())
    output = run("seed_demo", "--password", "pw-123456", "--tokens-file", str(tokens))
    assert dict(Tool.objects.values_list("name", "version")) == versions
    assert (Tool.objects.count(), RiskRule.objects.count(), RiskTier.objects.count(), Agent.objects.count()) == counts
    # The demo's five tools and the box office's three, synced from its MCP server; three rules; four agents.
    assert counts == (8, 3, 4, 4)
    assert "support-agent" in output and "alice" in output


def test_seed_demo_tokens_work_and_are_stored_hashed(tmp_path) -> None:
    tokens_file = tmp_path / "tokens.json"
    run("seed_demo", "--tokens-file", str(tokens_file))
    tokens = json.loads(tokens_file.read_text())
    assert set(tokens) == {"support-agent", "box-office-agent", "box-office-upstream", "visitor"}
    visitor = Agent.objects.get(name="visitor")
    assert visitor.token_hash == hash_token(tokens["visitor"])
    assert tokens["visitor"] not in visitor.token_hash
    response = Client().get("/api/v1/tools", headers={"Authorization": f"Bearer {tokens['visitor']}"})
    assert [tool["name"] for tool in response.json()["tools"]] == ["search_seats"]


def test_seed_demo_creates_reviewers_and_a_superuser(tmp_path) -> None:
    run("seed_demo", "--password", "pw-123456", "--tokens-file", str(tmp_path / "t.json"))
    users = {user.username: user for user in get_user_model().objects.all()}
    assert users["alice"].has_perm("approvals.review_toolcall")
    assert users["bob"].has_perm("approvals.review_toolcall")
    assert users["admin"].is_superuser and users["alice"].check_password("pw-123456")


def test_create_agent_prints_its_token_once_as_json(catalog) -> None:
    get_user_model().objects.create_user("carol")
    output = run(
        "create_agent", "ops-bot", "--owner", "carol", "--grant", "search_seats=0", "--grant", "hold_seats=1", "--json"
    )
    body = json.loads(output)
    agent = Agent.objects.get(name="ops-bot")
    assert body["name"] == "ops-bot" and agent.token_hash == hash_token(body["token"])
    assert agent.owner.username == "carol"
    assert dict(Grant.objects.filter(agent=agent).values_list("tool__name", "max_tier")) == {
        "search_seats": 0,
        "hold_seats": 1,
    }


@pytest.mark.parametrize("grant", ["search_seats", "search_seats=9", "no_such_tool=1"])
def test_create_agent_refuses_bad_grants(catalog, grant: str) -> None:
    with pytest.raises(CommandError):
        run("create_agent", "bad-bot", "--grant", grant)
    assert not Agent.objects.filter(name="bad-bot").exists()
