"""seed_demo run again keeps what people rely on: agents' tokens and reviewers' passwords."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from agents.models import Agent, Grant
from audit.models import Event
from demo.run import Access, banner

pytestmark = pytest.mark.django_db


def seed(tokens_file: Path, *args: str) -> str:
    out = StringIO()
    call_command("seed_demo", "--tokens-file", str(tokens_file), *args, stdout=out)
    return out.getvalue()


def password_hashes() -> dict[str, str]:
    return dict(get_user_model().objects.values_list("username", "password"))


def lists_tools(token: str) -> bool:
    return Client().get("/api/v1/tools", headers={"Authorization": f"Bearer {token}"}).status_code == 200


def test_a_second_seed_keeps_every_token_and_password(tmp_path: Path) -> None:
    tokens_file = tmp_path / "tokens.json"
    seed(tokens_file, "--password", "first-pw-123")
    tokens, passwords = json.loads(tokens_file.read_text()), password_hashes()

    output = seed(tokens_file, "--password", "other-pw-456")

    assert json.loads(tokens_file.read_text()) == tokens
    assert password_hashes() == passwords
    assert get_user_model().objects.get(username="alice").check_password("first-pw-123")
    assert all(lists_tools(token) for token in tokens.values())
    assert all(f"{name:<18} {token}\n" in output for name, token in tokens.items())  # printed again, not as new
    assert "(new)" not in output and "unchanged" in output


def test_rotate_tokens_issues_new_ones_and_the_old_stop_working(tmp_path: Path) -> None:
    tokens_file = tmp_path / "tokens.json"
    seed(tokens_file)
    old = json.loads(tokens_file.read_text())

    output = seed(tokens_file, "--rotate-tokens")

    new = json.loads(tokens_file.read_text())
    assert set(new) == set(old) and all(new[name] != old[name] for name in old)
    assert all(lists_tools(token) for token in new.values())
    assert not any(lists_tools(token) for token in old.values())
    assert output.count("(new)") == len(new)


def test_reset_passwords_sets_the_given_password_on_existing_accounts(tmp_path: Path) -> None:
    tokens_file = tmp_path / "tokens.json"
    seed(tokens_file, "--password", "first-pw-123")
    tokens = json.loads(tokens_file.read_text())

    seed(tokens_file, "--password", "second-pw-456", "--reset-passwords")

    users = get_user_model().objects.filter(username__in=["alice", "bob", "admin"])
    assert all(user.check_password("second-pw-456") for user in users) and len(users) == 3
    assert json.loads(tokens_file.read_text()) == tokens  # passwords reset, tokens kept


def test_an_agent_whose_token_is_not_in_the_file_gets_a_new_one(tmp_path: Path) -> None:
    tokens_file = tmp_path / "tokens.json"
    seed(tokens_file)
    tokens = json.loads(tokens_file.read_text())
    tokens_file.write_text(json.dumps({**tokens, "visitor": "gh_not-the-visitor's-token"}))

    output = seed(tokens_file)

    kept = json.loads(tokens_file.read_text())
    assert kept["support-agent"] == tokens["support-agent"] and kept["visitor"] != tokens["visitor"]
    assert lists_tools(kept["visitor"]) and output.count("(new)") == 1


def test_changed_grants_are_restored_through_a_new_audited_token(tmp_path: Path) -> None:
    tokens_file = tmp_path / "tokens.json"
    seed(tokens_file)
    tokens = json.loads(tokens_file.read_text())
    Grant.objects.filter(agent__name="visitor").delete()

    issued_before = Event.objects.filter(action="agent.token_issued", agent_name="visitor").count()

    seed(tokens_file)

    assert Event.objects.filter(action="agent.token_issued", agent_name="visitor").count() == issued_before + 1
    visitor = Agent.objects.get(name="visitor")
    assert list(Grant.objects.filter(agent=visitor).values_list("tool__name", flat=True)) == ["search_seats"]
    assert json.loads(tokens_file.read_text())["visitor"] != tokens["visitor"]


def test_the_demo_banner_prints_every_token_and_no_password_that_was_not_applied(tmp_path: Path) -> None:
    tokens = {"support-agent": "gh_one", "visitor": "gh_two"}

    kept = banner("http://127.0.0.1:8000", "new-pw-789", Access(tokens, tmp_path / "t.json", password_is_current=False))
    fresh = banner("http://127.0.0.1:8000", "new-pw-789", Access(tokens, tmp_path / "t.json", password_is_current=True))

    assert "support-agent     gh_one" in kept and "visitor           gh_two" in kept
    assert "password: new-pw-789" not in kept and "--reset-passwords" in kept
    assert "password: new-pw-789" in fresh
