"""The benchmark's own stack: a fresh database, the web servers, one Celery worker, the audit sequencer,
an instant downstream.

Gatehouse's web server is the Procfile's (gunicorn's threaded workers on config.wsgi)
with N processes; beside it runs the reference server, gunicorn's sync workers, the way
plain Django is usually deployed, so every ratio can be taken against the bare insert on
either. Each process runs in its own session (process group), so stopping it stops its
children too (gunicorn's workers); `Stack` stops everything it started on exit,
whatever the exit: an error, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import psycopg
import redis

from bench.parameters import BASE_DIR, PYTHON, BenchSettings

READY_TIMEOUT = 60.0
STOP_TIMEOUT = 10.0


def prepare_database(settings: BenchSettings) -> None:
    """Drop and create the bench database (nothing else on the server is touched)."""
    with psycopg.connect(f"{settings.pg_admin_url}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{settings.database}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{settings.database}"')


def flush_redis(settings: BenchSettings) -> None:
    """Empty the bench's own Redis database (its queue and counters only)."""
    redis.Redis.from_url(settings.redis_url).flushdb()


def manage(env: dict[str, str], *args: str) -> str:
    """Run a management command in a child process; return its output."""
    done = subprocess.run(
        [PYTHON, "manage.py", *args], cwd=BASE_DIR, env=env, check=True, capture_output=True, text=True
    )
    return done.stdout


def web_command(settings: BenchSettings, port: int | None = None) -> list[str]:
    """Return Gatehouse's web server command line: the Procfile's gunicorn, with the bench's processes and threads."""
    threaded = ["--worker-class", "gthread", "--threads", str(settings.web_threads)]
    return gunicorn_command(settings, port or settings.port, *threaded)


def reference_command(settings: BenchSettings) -> list[str]:
    """Return the reference server's command line: gunicorn's sync workers, as plain Django is usually served."""
    return gunicorn_command(settings, settings.reference_port)


def gunicorn_command(settings: BenchSettings, port: int, *options: str) -> list[str]:
    """Return gunicorn serving `config.wsgi` on `port` with the bench's processes, plus `options`."""
    bind = ["--bind", f"127.0.0.1:{port}", "--workers", str(settings.web_workers)]
    return [PYTHON, "-m", "gunicorn", "config.wsgi", *bind, *options, "--log-level", "warning"]


def worker_command() -> list[str]:
    """Return the Celery worker's command line, as in the Procfile."""
    return [
        PYTHON,
        "-m",
        "celery",
        "-A",
        "config",
        "worker",
        "--pool=solo",
        "--loglevel=WARNING",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]


def sequencer_command() -> list[str]:
    """Return the audit sequencer's command line, as in the Procfile."""
    return [PYTHON, "manage.py", "audit_sequencer"]


def downstream_command(settings: BenchSettings) -> list[str]:
    """Return the instant downstream's command line (bench/downstream.py)."""
    return [PYTHON, "-m", "bench.downstream", str(settings.downstream_port)]


def display(command: list[str]) -> str:
    """Return a command line as an operator would type it (the venv's python as `python`)."""
    return shlex.join(["python" if part == PYTHON else part for part in command])


class Stack:
    """Start the web server and the worker; stop both (and their children) on exit."""

    def __init__(self, settings: BenchSettings, log_dir: Path) -> None:
        self.settings = settings
        self.env = settings.environment()
        self.log_dir = log_dir
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def __enter__(self) -> Stack:
        self._previous_sigterm = signal.signal(signal.SIGTERM, _raise_interrupt)
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()
        signal.signal(signal.SIGTERM, self._previous_sigterm)

    def start(self, name: str, command: list[str], **env: str) -> None:
        """Start one process in its own session (`env` added to the stack's), its output in the log folder."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_dir / f"{name}.log", "ab") as log:
            self.processes[name] = subprocess.Popen(
                command,
                cwd=BASE_DIR,
                env={**self.env, **env},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def start_all(self) -> None:
        """Start the web servers, the worker, the sequencer and the instant downstream, and wait until all answer."""
        ports = {
            "BENCH_PORT": self.settings.port,
            "BENCH_PORTABLE_PORT": self.settings.portable_port,
            "BENCH_DOWNSTREAM_PORT": self.settings.downstream_port,
            "BENCH_REFERENCE_PORT": self.settings.reference_port,
        }
        for name, port in ports.items():
            if _port_in_use(port):
                raise RuntimeError(f"port {port} is taken: stop what listens there or set {name}")
        self.start("web", web_command(self.settings))
        portable = web_command(self.settings, self.settings.portable_port)
        self.start("web-portable", portable, GATEHOUSE_POSTGRESQL_STORE="0")
        self.start("web-reference", reference_command(self.settings))
        self.start("worker", worker_command())
        self.start("sequencer", sequencer_command())
        self.start("downstream", downstream_command(self.settings))
        for url in (self.settings.base_url, self.settings.portable_base_url, self.settings.reference_base_url):
            self.wait_until(partial(_web_ready, url), f"the web server at {url}")
        self.wait_until(self._worker_ready, "the Celery worker")
        self.wait_until(self._sequencer_ready, "the audit sequencer")
        self.wait_until(lambda: _port_in_use(self.settings.downstream_port), "the instant downstream")

    def wait_until(self, ready: Callable[[], bool], what: str) -> None:
        """Poll `ready` until it holds; fail if a process died or it took too long."""
        deadline = time.monotonic() + READY_TIMEOUT
        while not ready():
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise RuntimeError(f"{name} exited with {process.returncode}; see {self.log_dir / name}.log")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not become ready in {READY_TIMEOUT:.0f} s")
            time.sleep(0.2)

    def _sequencer_ready(self) -> bool:
        return self._sequencer_starts() > 0

    def _sequencer_starts(self) -> int:
        return (self.log_dir / "sequencer.log").read_bytes().count(b"audit sequencer started")

    @contextmanager
    def sequencer_stopped(self) -> Iterator[None]:
        """Stop the audit sequencer for the block (this process seals meanwhile), then start it again."""
        _stop_group(self.processes.pop("sequencer"))
        starts = self._sequencer_starts()
        try:
            yield
        finally:
            self.start("sequencer", sequencer_command())
            self.wait_until(lambda: self._sequencer_starts() > starts, "the audit sequencer")

    def _worker_ready(self) -> bool:
        from config.celery import app

        with suppress(Exception):
            return bool(app.control.ping(timeout=0.5))
        return False

    def stop(self) -> None:
        """Stop every started process group: SIGTERM, then SIGKILL after a grace period."""
        for process in self.processes.values():
            _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        for process in self.processes.values():
            with suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            _signal_group(process, signal.SIGKILL)  # whatever is left of the group (gunicorn's workers)
            with suppress(subprocess.TimeoutExpired):
                process.wait(timeout=2)
        self.processes.clear()


def _web_ready(base_url: str) -> bool:
    try:
        return httpx.get(f"{base_url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _port_in_use(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _signal_group(process: subprocess.Popen[bytes], sig: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """Stop one process group: SIGTERM, then SIGKILL after the grace period."""
    _signal_group(process, signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):
        process.wait(timeout=STOP_TIMEOUT)
    _signal_group(process, signal.SIGKILL)
    process.wait(timeout=2)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def drain_queue(settings: BenchSettings, timeout: float = 30.0) -> int:
    """Drop the tasks a load run left queued and wait for the worker's current one; return how many.

    Previews and executions queued by a throughput run would otherwise be worked off
    during the next run and skew it. The ingest figures measure the API; the worker
    had its share of the CPU during the run itself.
    """
    client = redis.Redis.from_url(settings.redis_url)
    dropped = int(client.llen("celery"))
    client.delete("celery")
    deadline = time.monotonic() + timeout
    while client.hlen("unacked") and time.monotonic() < deadline:
        time.sleep(0.1)
    return dropped
