"""The embedded default as `make demo` runs it: SQLite, the embedded broker, and the Procfile's processes.

`EmbeddedStack` gives each test a var folder of its own (database, broker folder,
tokens), migrates and seeds it as `make demo` does, and starts any of the Procfile's
processes — web, worker, beat, agent — with the very commands `make demo` runs, each
in a process group of its own with its output in a log file.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import httpx

from tests.processes import BASE_DIR, free_port

# What the suite's environment sets that `make demo` leaves to its defaults.
NOT_IN_A_DEMO = (
    "DATABASE_URL",
    "CELERY_BROKER_URL",
    "GATEHOUSE_REDIS_URL",
    "SECRET_KEY",
    "DEBUG",
    "GATEHOUSE_RATE_LIMIT_PER_MINUTE",
    "DJANGO_ALLOW_ASYNC_UNSAFE",
    "GATEHOUSE_DEMO_URL",
    "GATEHOUSE_DEMO_SERVICES_URL",
)
ALARMING = re.compile(r"CRITICAL|Traceback|Unrecoverable|SIGKILL|rc=-9")


def embedded_env(var_dir: Path, port: int) -> dict[str, str]:
    """Return `make demo`'s environment for a stack kept in `var_dir` and served on `port`."""
    env = {key: value for key, value in os.environ.items() if key not in NOT_IN_A_DEMO}
    bin_dir = str(Path(sys.executable).parent)
    env.update(
        DEBUG="1",
        GATEHOUSE_DEMO="1",
        GATEHOUSE_VAR_DIR=str(var_dir),
        GATEHOUSE_DEMO_PORT=str(port),
        GATEHOUSE_DEMO_URL=f"http://127.0.0.1:{port}",
        GATEHOUSE_DEMO_SERVICES_URL=f"http://127.0.0.1:{port}",
        DJANGO_SETTINGS_MODULE="config.settings",
        PYTHONUNBUFFERED="1",
        PATH=bin_dir + os.pathsep + env.get("PATH", ""),
    )
    return env


def procfile() -> dict[str, str]:
    """Return the Procfile's commands by process name."""
    lines = (BASE_DIR / "Procfile").read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines if line and not line.startswith("#"))


class EmbeddedStack:
    """Processes of one embedded-default stack; `stop_all()` ends them warmly and reports how each ended."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.var_dir = folder / "var"
        self.port = free_port()
        self.env = embedded_env(self.var_dir, self.port)
        self.url = f"http://127.0.0.1:{self.port}"
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: dict[str, IO[bytes]] = {}

    def manage(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run `manage.py ARGS` against this stack's database and broker."""
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=BASE_DIR,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def prepare(self) -> None:
        """Migrate and seed, as `make demo` does before it starts the processes."""
        for command in (["migrate", "--no-input"], ["seed_demo"]):
            done = self.manage(*command)
            assert done.returncode == 0, done.stderr

    def tokens(self) -> dict[str, str]:
        """Return the demo agents' tokens that seed_demo wrote."""
        return json.loads((self.var_dir / "demo-tokens.json").read_text())

    def start(self, *names: str) -> None:
        """Start the Procfile's processes `names`."""
        commands = procfile()
        for name in names:
            self._spawn(name, ["bash", "-c", commands[name]])

    def start_module(self, name: str, module: str) -> None:
        """Start `python -m module` beside the stack, as process `name`."""
        self._spawn(name, [sys.executable, "-m", module])

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = (self.folder / f"{name}.log").open("wb")
        self._logs[name] = log
        self.processes[name] = subprocess.Popen(
            argv, cwd=BASE_DIR, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def wait_until_up(self, timeout: float = 90) -> None:
        """Return once /healthz answers 200 (database and broker reachable)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.assert_alive()
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"the stack did not come up:\n{self.logs()}")

    def assert_alive(self) -> None:
        """Fail, with the logs, if any process has ended."""
        ended = {name: process.returncode for name, process in self.processes.items() if process.poll() is not None}
        assert not ended, f"processes ended: {ended}\n{self.logs()}"

    def stop(self, name: str, timeout: float = 30) -> int:
        """SIGTERM process `name`, as honcho does on Ctrl-C; return its exit status (SIGKILL only after `timeout`)."""
        process = self.processes.pop(name)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self._logs.pop(name).close()
        return process.returncode

    def stop_all(self) -> dict[str, int]:
        """Stop every process; return their exit statuses by name."""
        return {name: self.stop(name) for name in list(self.processes)}

    def logs(self) -> str:
        """Return the tail of every process's log."""
        parts = []
        for path in sorted(self.folder.glob("*.log")):
            parts.append(f"--- {path.stem}\n{path.read_text(errors='replace')[-3000:]}")
        return "\n".join(parts)

    def alarming_lines(self) -> list[str]:
        """Return the log lines that say a process crashed or was killed."""
        return [
            line
            for path in self.folder.glob("*.log")
            for line in path.read_text(errors="replace").splitlines()
            if ALARMING.search(line)
        ]

    def status_counts(self) -> dict[str, int]:
        """Return how many calls the stack's database holds in each status."""
        script = (
            "import json; from django.db.models import Count; from approvals.models import ToolCall; "
            "print(json.dumps(dict(ToolCall.objects.values_list('status').annotate(n=Count('pk')))))"
        )
        done = self.manage("shell", "-c", script)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    def unsettled_older_than(self, seconds: float) -> int:
        """Return how many calls created more than `seconds` ago are still approved or executing."""
        script = (
            "from datetime import timedelta; from django.utils import timezone; "
            "from approvals.models import ToolCall; from approvals.states import Status; "
            f"since = timezone.now() - timedelta(seconds={seconds}); "
            "print(ToolCall.objects.filter(created_at__lt=since, "
            "status__in=[Status.APPROVED, Status.EXECUTING]).count())"
        )
        done = self.manage("shell", "-c", script)
        assert done.returncode == 0, done.stderr
        return int(done.stdout.strip().splitlines()[-1])
