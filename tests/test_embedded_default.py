"""The embedded default that `make demo` runs: SQLite, the embedded broker, real processes.

The rest of the suite runs on PostgreSQL and Redis; these tests run the product the
way a newcomer first meets it, with the Procfile's own commands and no server.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.embedded import EmbeddedStack, embedded_env
from tests.processes import BASE_DIR, free_port

pytestmark = pytest.mark.worker

SOAK_SECONDS = 180
CALL_TIMEOUT = 60


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[EmbeddedStack]:
    stack = EmbeddedStack(tmp_path)
    stack.prepare()
    yield stack
    stack.stop_all()


def propose(stack: EmbeddedStack, token: str, key: str, order: str, centavos: int) -> dict:
    response = httpx.post(
        f"{stack.url}/api/v1/tool-calls",
        params={"wait": 20},
        headers={"Authorization": f"Bearer {token}"},
        json={
            "tool": "emitir_estorno",
            "idempotency_key": key,
            "arguments": {"pedido_id": order, "valor_centavos": centavos, "motivo": "atraso_entrega"},
        },
        timeout=30,
    )
    assert response.status_code in {201, 202}, response.text
    return response.json()


def wait_for_status(stack: EmbeddedStack, token: str, call_id: str) -> str:
    deadline = time.monotonic() + CALL_TIMEOUT
    while True:
        response = httpx.get(
            f"{stack.url}/api/v1/tool-calls/{call_id}",
            params={"wait": 10},
            headers={"Authorization": f"Bearer {token}"},
            timeout=20,
        )
        status = response.json()["status"]
        if status not in {"approved", "executing"} or time.monotonic() > deadline:
            return status


def reviewer_session(stack: EmbeddedStack, username: str) -> httpx.Client:
    """Return an HTTP client logged in to the console as `username` (the demo's password)."""
    client = httpx.Client(base_url=stack.url, timeout=20)
    login = client.get("/accounts/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text).group(1)
    answer = client.post(
        "/accounts/login/",
        data={"csrfmiddlewaretoken": token, "username": username, "password": "gatehouse"},
        headers={"Referer": f"{stack.url}/accounts/login/"},
    )
    assert answer.status_code == 302, answer.text[:500]
    return client


def approve_in_console(client: httpx.Client, call_id: str) -> None:
    """Open the call's page and submit its Approve form exactly as the browser would."""
    page = client.get(f"/calls/{call_id}/").text
    form = re.search(r'<form method="post" action="(/calls/[^"]+/approve/)".*?</form>', page, re.S)
    assert form, page[:2000]
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form.group(0)))
    answer = client.post(form.group(1), data=fields, headers={"Referer": f"{client.base_url}/calls/{call_id}/"})
    assert answer.status_code in {200, 302}, answer.text[:500]


def test_on_the_embedded_default_a_held_call_is_approved_in_the_console_and_runs_and_a_small_one_runs_alone(
    stack: EmbeddedStack,
) -> None:
    stack.start("web", "worker", "beat", "sequencer")
    stack.wait_until_up()
    token = stack.tokens()["support-agent"]

    small = propose(stack, token, "embedded-small-refund", "PED-00000012", 5000)
    held = propose(stack, token, "embedded-large-refund", "PED-00000018", 150000)

    assert small["risk_tier"] == 1
    assert wait_for_status(stack, token, small["id"]) == "succeeded"
    assert held["status"] == "pending_approval"
    approve_in_console(reviewer_session(stack, "alice"), held["id"])
    assert wait_for_status(stack, token, held["id"]) == "succeeded"

    exits = stack.stop_all()
    assert all(code in {0, -15} for code in exits.values()), exits
    verify = stack.manage("audit_verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert stack.alarming_lines() == []


def test_the_embedded_default_runs_three_minutes_under_its_agent_without_a_crash_and_settles_every_call(
    stack: EmbeddedStack,
) -> None:
    stack.start("web", "worker", "beat", "sequencer", "agent")
    stack.wait_until_up()
    stack.start_module("reviewer", "tests.embedded_reviewer")

    started = time.monotonic()
    while time.monotonic() - started < SOAK_SECONDS:
        time.sleep(5)
        stack.assert_alive()
    # Nothing that the agent proposed got stuck between approval and its outcome.
    assert stack.unsettled_older_than(seconds=30) == 0, stack.logs()

    exits = stack.stop_all()
    counts = stack.status_counts()
    assert all(code in {0, -15} for code in exits.values()), exits
    assert stack.alarming_lines() == [], stack.logs()
    assert sum(counts.values()) >= 50, counts
    assert counts.get("succeeded", 0) > 0 and counts.get("rejected", 0) > 0, counts
    verify = stack.manage("audit_verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_make_demo_stops_every_process_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    env = embedded_env(tmp_path / "var", free_port())
    log = (tmp_path / "demo.log").open("wb")
    demo = subprocess.Popen(
        [sys.executable, "-m", "demo.run"], cwd=BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 120
        while b"demo agent loop talking MCP" not in (tmp_path / "demo.log").read_bytes():
            assert demo.poll() is None and time.monotonic() < deadline, (tmp_path / "demo.log").read_text()
            time.sleep(1)
        time.sleep(5)  # the agent is proposing, the worker executing
        demo.send_signal(2)  # Ctrl-C
        assert demo.wait(timeout=60) == 0
    finally:
        if demo.poll() is None:
            demo.kill()
        log.close()
    output = (tmp_path / "demo.log").read_text()
    stopped = re.findall(r"(\w+) stopped \(rc=(-?\d+)\)", output)
    assert {name for name, _ in stopped} == {"web", "worker", "beat", "sequencer", "agent"}, output[-3000:]
    assert "SIGKILL" not in output, output[-3000:]
    assert all(int(code) in {0, -15} for _, code in stopped), stopped
