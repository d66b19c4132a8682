"""Deployment settings, secrets kept out of storage and logs."""

from __future__ import annotations

import logging
import os
import secrets
import subprocess
import sys

import pytest
from django.conf import settings

from agents.models import Agent
from tests.conftest import refund

pytestmark = pytest.mark.django_db


def test_check_deploy_is_clean_behind_https() -> None:
    # A deployment's environment: none of the test run's conveniences.
    env = {
        **{k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"},
        "DEBUG": "0",
        "GATEHOUSE_HTTPS": "1",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "gatehouse.example.com",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_tokens_are_stored_only_as_hashes(make_agent) -> None:
    agent, token = make_agent("support-agent", {"emitir_estorno": 3})
    stored = Agent.objects.filter(pk=agent.pk).values().get()
    assert token not in str(stored)
    assert stored["token_hint"] == token[:10] and len(token) > 40


def test_rotating_a_token_revokes_the_old_one_at_once(agent_api, make_agent) -> None:
    api = agent_api("support-agent", {"emitir_estorno": 3})
    assert api.tools().status_code == 200
    Agent.objects.get(name="support-agent").rotate_token()
    assert api.tools().status_code == 401


def test_no_token_or_secret_reaches_the_logs(agent_api, caplog) -> None:
    api = agent_api("support-agent", {"emitir_estorno": 3})
    token = api.headers["Authorization"].removeprefix("Bearer ")
    with caplog.at_level(logging.DEBUG):
        api.propose(refund(30000, idempotency_key="k-log"))
        api.propose(refund(motivo="x", idempotency_key="k-log-2"))
        api.client.get("/api/v1/tools", headers={"Authorization": f"Bearer {token}x"})
    text = "\n".join(f"{record.getMessage()} {record.args}" for record in caplog.records)
    assert token not in text
    assert settings.SECRET_KEY not in text
