"""Deployment: the probes' endpoints, the Content-Security-Policy header, no embedded defaults in production.

The probes are asked of a real web server process (uvicorn, as the Procfile runs it) whose database or
broker points at a port nothing listens on.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from django.test import Client

from tests.processes import BASE_DIR, free_port, session_database_url, wait_until

NOWHERE_REDIS = "redis://127.0.0.1:{port}/0"
NOWHERE_POSTGRES = "postgres://postgres@127.0.0.1:{port}/gatehouse"


class WebServer:
    """`uvicorn config.asgi:application` in a subprocess, with the suite's environment plus `env`."""

    def __init__(self, folder: Path, **env: str) -> None:
        self.port = free_port()
        self.log = folder / f"web-{self.port}.log"
        pool = {"GATEHOUSE_DB_POOL_MIN": "1", "GATEHOUSE_DB_POOL_MAX": "2"}
        self.env = {**os.environ, "GATEHOUSE_VAR_DIR": str(folder), **pool, **env}
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> WebServer:
        args = [sys.executable, "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1"]
        args += ["--port", str(self.port), "--log-level", "warning"]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(args, cwd=BASE_DIR, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        wait_until(self.answers, timeout=40, interval=0.1)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.process is not None
        self.process.terminate()
        self.process.wait(timeout=15)

    def answers(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"the web process exited: {self.log.read_text()[-4000:]}")
        try:
            return httpx.get(self.url("/healthz/live"), timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def get(self, path: str) -> httpx.Response:
        # The database check waits for the connection pool's own timeout before it says "unreachable".
        return httpx.get(self.url(path), timeout=30)


@pytest.fixture
def served_database(django_db_setup: None) -> str:
    """Return the URL of the database pytest-django created, for a server process of its own."""
    return session_database_url()


def test_live_answers_while_the_database_and_the_broker_are_unreachable(tmp_path: Path) -> None:
    nowhere = {
        "DATABASE_URL": NOWHERE_POSTGRES.format(port=free_port()),
        "CELERY_BROKER_URL": NOWHERE_REDIS.format(port=free_port()),
    }
    with WebServer(tmp_path, **nowhere) as server:
        live = server.get("/healthz/live")
        ready = server.get("/healthz/ready")
    assert (live.status_code, live.json()) == (200, {"status": "ok"})
    assert ready.status_code == 503
    assert ready.json() == {"status": "degraded", "database": "unreachable", "broker": "unreachable"}


def test_ready_fails_on_an_unreachable_broker_while_live_still_answers(tmp_path: Path, served_database: str) -> None:
    nowhere = {"DATABASE_URL": served_database, "CELERY_BROKER_URL": NOWHERE_REDIS.format(port=free_port())}
    with WebServer(tmp_path, **nowhere) as server:
        live = server.get("/healthz/live")
        ready = server.get("/healthz/ready")
        older = server.get("/healthz")  # the older name of ready
    assert live.status_code == 200
    assert ready.status_code == 503
    assert ready.json() == {"status": "degraded", "database": "ok", "broker": "unreachable"}
    assert (older.status_code, older.json()) == (503, ready.json())


def test_neither_probe_fails_when_only_gatehouses_own_redis_is_down(tmp_path: Path, served_database: str) -> None:
    # The broker is the suite's Redis; the rate limits' and waiters' Redis is elsewhere, and down.
    env = {"DATABASE_URL": served_database, "GATEHOUSE_REDIS_URL": NOWHERE_REDIS.format(port=free_port())}
    with WebServer(tmp_path, **env) as server:
        live = server.get("/healthz/live")
        ready = server.get("/healthz/ready")
    assert live.status_code == 200
    assert (ready.status_code, ready.json()) == (200, {"status": "ok", "database": "ok", "broker": "ok"})


def test_live_consults_no_database() -> None:
    # No django_db mark: pytest-django fails any query this test makes.
    response = Client().get("/healthz/live")
    assert response.status_code == 200
    assert response["Cache-Control"].startswith("max-age=0")


@pytest.mark.django_db
def test_console_and_admin_pages_carry_a_policy_without_inline_script_or_style() -> None:
    for path in ("/accounts/login/", "/admin/login/"):
        policy = Client().get(path)["Content-Security-Policy"]
        directives = dict(part.strip().split(" ", 1) for part in policy.split(";"))
        assert directives["script-src"] == "'self'"
        assert directives["style-src"] == "'self'"
        assert directives["frame-ancestors"] == "'none'"
        assert "unsafe" not in policy


# What the policy refuses: a <script> or <style> with a body, an on…= handler, a style= attribute, a javascript: URL.
INLINE = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>|<style\b|\son[a-z]+\s*=|\sstyle\s*=|javascript:", re.IGNORECASE)


def test_no_template_served_to_a_browser_holds_inline_script_or_style() -> None:
    # Mail is read in a mail client, which never sees the site's policy; mail clients want inline styles.
    served = [path for path in (BASE_DIR / "templates").rglob("*.html") if path.name != "email.html"]
    offenders = [
        f"{path.relative_to(BASE_DIR)}: {m.group(0)}" for path in served for m in INLINE.finditer(path.read_text())
    ]
    assert served and offenders == []


# ------------------------------------------------------------------ no embedded defaults in production


def start_settings(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `django.setup()` in a fresh interpreter: the suite's keys, not its database and broker, plus `env`."""
    kept = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "GATEHOUSE_DEMO"}}
    environment = {**kept, "DJANGO_SETTINGS_MODULE": "config.settings", "GATEHOUSE_VAR_DIR": str(tmp_path), **env}
    code = "import django; django.setup()"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=BASE_DIR, env=environment, capture_output=True, text=True, timeout=60
    )


def last_line(result: subprocess.CompletedProcess[str]) -> str:
    return result.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({}, ["DATABASE_URL (SQLite)", "CELERY_BROKER_URL (the embedded broker)"]),
        ({"DATABASE_URL": "sqlite:///{tmp}/db.sqlite3", "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0"}, ["SQLite"]),
        ({"DATABASE_URL": "postgres://postgres@127.0.0.1/gatehouse"}, ["the embedded broker"]),
        ({"DATABASE_URL": "postgres://postgres@127.0.0.1/gatehouse", "CELERY_BROKER_URL": "filesystem://"}, ["broker"]),
    ],
    ids=["no-variables", "sqlite-url", "embedded-broker", "filesystem-broker"],
)
def test_debug_off_refuses_to_start_on_the_embedded_defaults(
    tmp_path: Path, env: dict[str, str], named: list[str]
) -> None:
    env = {name: value.format(tmp=tmp_path) for name, value in env.items()}
    result = start_settings(tmp_path, DEBUG="0", **env)
    assert result.returncode != 0
    line = last_line(result)
    assert line.startswith("django.core.exceptions.ImproperlyConfigured: DEBUG is off but ")
    assert all(name in line for name in named), line
    assert "GATEHOUSE_ALLOW_EMBEDDED=1" in line and "DATABASE_URL=postgres://" in line


def test_debug_off_starts_on_the_embedded_defaults_when_asked_to(tmp_path: Path) -> None:
    result = start_settings(tmp_path, DEBUG="0", GATEHOUSE_ALLOW_EMBEDDED="1")
    assert result.returncode == 0, result.stderr


def test_debug_on_starts_on_the_embedded_defaults(tmp_path: Path) -> None:
    result = start_settings(tmp_path, DEBUG="1")
    assert result.returncode == 0, result.stderr


def test_debug_off_starts_on_postgresql_and_redis(tmp_path: Path) -> None:
    result = start_settings(
        tmp_path, DEBUG="0", DATABASE_URL=os.environ["DATABASE_URL"], CELERY_BROKER_URL=os.environ["CELERY_BROKER_URL"]
    )
    assert result.returncode == 0, result.stderr


def test_manage_py_check_refuses_and_then_passes_with_the_variable(tmp_path: Path) -> None:
    kept = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "GATEHOUSE_DEMO"}}
    env = {**kept, "DEBUG": "0", "GATEHOUSE_VAR_DIR": str(tmp_path)}
    check = [sys.executable, "manage.py", "check"]
    refused = subprocess.run(check, cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=120)
    allowed = subprocess.run(
        check, cwd=BASE_DIR, env={**env, "GATEHOUSE_ALLOW_EMBEDDED": "1"}, capture_output=True, text=True, timeout=120
    )
    assert refused.returncode != 0 and "GATEHOUSE_ALLOW_EMBEDDED=1" in last_line(refused)
    assert allowed.returncode == 0, allowed.stderr
