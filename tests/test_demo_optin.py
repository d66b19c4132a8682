"""The demo is opt-in: without GATEHOUSE_DEMO=1 there is no demo app, no /demo-services/, no seed_demo.

The suite itself runs with the demo on (`make test` sets GATEHOUSE_DEMO=1), so the
product without it is started in child processes, as a deployment would start it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import resolve

from demo.run import demo_environment

BASE_DIR = Path(settings.BASE_DIR)
TURN_IT_ON = (
    "CommandError: The demo is not installed: set GATEHOUSE_DEMO=1 (as `make demo` does) and run seed_demo again."
)

# What a request to the demo services answers, from a product started without the demo
# and with a fault switched on (which only the demo would act on).
REQUEST_SCRIPT = """
import django
django.setup()
from django.conf import settings
from django.test import Client
answer = Client().post("/demo-services/tools/emitir_estorno", {}, content_type="application/json")
print("demo" in settings.INSTALLED_APPS, answer.status_code)
"""


def without_the_demo(*args: str) -> subprocess.CompletedProcess[str]:
    """Run `python *args` in the project with the environment of the tests, less GATEHOUSE_DEMO."""
    env = {name: value for name, value in os.environ.items() if name != "GATEHOUSE_DEMO"}
    env.update(LOG_LEVEL="WARNING", GATEHOUSE_DEMO_FAULT="unavailable:PED-00000001")
    return subprocess.run(
        [sys.executable, *args], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_seed_demo_without_the_demo_fails_with_one_line_saying_how_to_turn_it_on() -> None:
    done = without_the_demo("manage.py", "seed_demo")

    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [TURN_IT_ON]
    assert done.stdout == ""


def test_seed_demo_without_the_demo_answers_the_same_whatever_its_options(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"

    done = without_the_demo("manage.py", "seed_demo", "--password", "pw-123456", "--tokens-file", str(tokens))

    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [TURN_IT_ON]
    assert not tokens.exists()


def test_demo_services_are_not_found_without_the_demo() -> None:
    done = without_the_demo("-c", REQUEST_SCRIPT)

    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "404"]


def test_the_demo_is_installed_and_mounted_when_asked_for() -> None:
    assert settings.GATEHOUSE_DEMO
    assert "demo" in settings.INSTALLED_APPS
    assert resolve("/demo-services/tools/emitir_estorno").url_name == "execute"


def test_make_demo_turns_the_demo_on(monkeypatch: pytest.MonkeyPatch) -> None:
    # A copy stands in for the process environment, which demo_environment fills in.
    monkeypatch.setattr(os, "environ", {name: value for name, value in os.environ.items() if name != "GATEHOUSE_DEMO"})

    assert demo_environment()["GATEHOUSE_DEMO"] == "1"
