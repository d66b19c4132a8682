"""The bench's web servers are stock: the Procfile's own command for Gatehouse, gunicorn sync workers for reference."""

from __future__ import annotations

import importlib.util
import os
import subprocess

from bench.parameters import BASE_DIR, PYTHON, BenchSettings
from bench.stack import reference_command, web_command

SETTINGS = BenchSettings(port=18090, reference_port=18093, web_workers=3, web_threads=2)


def procfile_web_argv(env: dict[str, str]) -> list[str]:
    """Return the Procfile's `web` command as the shell would run it with `env`, `python` as this interpreter."""
    line = next(line for line in (BASE_DIR / "Procfile").read_text().splitlines() if line.startswith("web: "))
    command = line.removeprefix("web: ").removeprefix("exec ")
    printed = subprocess.run(
        ["bash", "-c", f"printf '%s\\n' {command}"], env={**os.environ, **env}, capture_output=True, text=True
    )
    argv = printed.stdout.splitlines()
    return [PYTHON if part == "python" else part for part in argv]


def test_the_bench_runs_gatehouse_under_the_procfiles_own_web_command() -> None:
    env = {"GATEHOUSE_WEB_BIND": "127.0.0.1:18090", "WEB_CONCURRENCY": "3", "GATEHOUSE_WEB_THREADS": "2"}
    assert web_command(SETTINGS) == procfile_web_argv(env)


def test_the_reference_server_is_gunicorns_sync_workers_on_the_same_wsgi_app() -> None:
    command = reference_command(SETTINGS)
    assert command[:4] == [PYTHON, "-m", "gunicorn", "config.wsgi"]
    assert "--worker-class" not in command and "-k" not in command  # gunicorn's default: sync workers
    assert command[command.index("--bind") + 1] == "127.0.0.1:18093"
    assert command[command.index("--workers") + 1] == "3"


def test_no_server_is_patched() -> None:
    assert importlib.util.find_spec("bench.serve") is None
    for command in (web_command(SETTINGS), reference_command(SETTINGS)):
        assert not any("bench" in part for part in command[1:])  # [0]: the interpreter, wherever the checkout is
