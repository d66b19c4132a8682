"""Fixtures that start real processes: Celery workers (with beat embedded), private Redis servers and sentinels.

Also a real HTTP server in a thread (`http_server`), for tests that need a peer to talk to.

A worker is a real `celery -A config worker` process on the test database (the one
pytest-django created, by name) that calls the demo services of pytest-django's
live server. Killing it is SIGKILL to its whole process group, as an OOM killer
or a lost machine would do it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.conf import settings

BASE_DIR = Path(__file__).resolve().parent.parent
READY_TIMEOUT = 40.0

# Short enough that crash and outage tests finish in seconds.
WORKER_SETTINGS = {
    "GATEHOUSE_SWEEP_INTERVAL": "1",
    "GATEHOUSE_EXECUTION_LEASE": "5",
    "GATEHOUSE_EXECUTION_MAX_ATTEMPTS": "3",
    "GATEHOUSE_DB_POOL_MIN": "1",
    "GATEHOUSE_DB_POOL_MAX": "4",
}


def free_port() -> int:
    """Return a TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def http_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve `handler` on a free loopback port from a thread; yield its base URL (http://127.0.0.1:PORT)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def wait_until(predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.05) -> Any:
    """Poll `predicate` until it returns something truthy; return that, or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)


def session_database_url() -> str:
    """Return a DATABASE_URL naming the database pytest-django created for this session."""
    name = settings.DATABASES["default"]["NAME"]
    if settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{name}"
    parts = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(parts._replace(path=f"/{name}"))


class RedisServer:
    """A private redis-server on its own port, which a test may stop and start again (a replica of another's)."""

    def __init__(self, folder: Path, replica_of: int | None = None) -> None:
        self.port = free_port()
        self.folder = folder
        self.replica_of = replica_of
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server and return once it answers PING."""
        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        if self.replica_of is not None:
            args += ["--replicaof", "127.0.0.1", str(self.replica_of)]
        log = (self.folder / f"redis-{self.port}.log").open("ab")
        self.process = subprocess.Popen([*args, "--dir", str(self.folder)], stdout=log, stderr=subprocess.STDOUT)
        wait_until(self.answers, timeout=10)

    def stop(self) -> None:
        """Stop the server (everything in it is lost: it keeps no files)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self.process = None

    def answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def queue_length(self, queue: str = "celery") -> int:
        """Return how many messages wait in a Celery queue on this server."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as sock:
            sock.sendall(f"LLEN {queue}\r\n".encode())
            return int(sock.recv(64).strip().lstrip(b":"))


class SentinelServer:
    """A private Redis Sentinel (`redis-server --sentinel`) watching one master, on its own port."""

    MASTER = "gatehouse-test"

    def __init__(self, folder: Path, master_port: int) -> None:
        self.port = free_port()
        self.folder = folder
        self.master_port = master_port
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, database: int = 0) -> str:
        """Return a Sentinel URL naming this sentinel (kombu's form, for the broker and Gatehouse's own Redis)."""
        return f"sentinel://127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        """Start the sentinel and return once it names the master (it rewrites its file: one of its own)."""
        config = self.folder / f"sentinel-{self.port}.conf"
        config.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {self.folder}\n"
            f"sentinel monitor {self.MASTER} 127.0.0.1 {self.master_port} 1\n"
            f"sentinel down-after-milliseconds {self.MASTER} 1000\n"
            f"sentinel failover-timeout {self.MASTER} 3000\n"
        )
        log = (self.folder / f"sentinel-{self.port}.log").open("ab")
        self.process = subprocess.Popen(
            ["redis-server", str(config), "--sentinel"], stdout=log, stderr=subprocess.STDOUT
        )
        wait_until(lambda: self.master() == ("127.0.0.1", self.master_port), timeout=10)

    def master(self) -> tuple[str, int] | None:
        """Return the address the sentinel gives for the master, or None if it gives none (yet)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(f"SENTINEL get-master-addr-by-name {self.MASTER}\r\n".encode())
                lines = sock.recv(256).split(b"\r\n")
        except OSError:
            return None
        if not lines[0].startswith(b"*2"):
            return None
        return lines[2].decode(), int(lines[4])

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self.process = None


class CeleryWorker:
    """A `celery -A config worker -B` process in its own process group."""

    def __init__(self, env: dict[str, str], folder: Path) -> None:
        self.env = env
        self.folder = folder
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = folder / "worker.log"

    def start(self) -> CeleryWorker:
        """Start the worker (with beat embedded) and return once it is ready to consume."""
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        args = [sys.executable, "-m", "celery", "-A", "config", "worker", "-B", "--pool=solo", "--loglevel=INFO"]
        args += ["-s", str(self.folder / f"beat-{uuid.uuid4().hex[:8]}"), "-n", f"test-{uuid.uuid4().hex[:8]}@%h"]
        args += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            args, cwd=BASE_DIR, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        wait_until(lambda: self._ready_since(offset), timeout=READY_TIMEOUT, interval=0.1)
        return self

    def _ready_since(self, offset: int) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"the worker exited with {self.process.returncode}:\n{self.log()}")
        with self.log_path.open("rb") as handle:
            handle.seek(offset)
            return b" ready." in handle.read()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the worker and everything it started: no cleanup, no acknowledgement.

        The whole process group, even when the worker itself already died: its embedded
        beat would otherwise live on as an orphan, sweeping the test broker forever.
        """
        if self.process is None:
            return
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        """Stop the worker warmly (SIGTERM), or kill it if it does not stop within 15 s."""
        if not self.running:
            self.kill()  # whatever of its group is left
            return
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()
        with suppress(ProcessLookupError):  # beat runs in a child process: leave nothing of the group behind
            os.killpg(self.process.pid, signal.SIGKILL)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]


def worker_env(live_server_url: str, broker_url: str, folder: Path) -> dict[str, str]:
    """Return the environment of a worker on the test database, calling the live server's demo services."""
    env = {key: value for key, value in os.environ.items() if key != "GATEHOUSE_DEMO_FAULT"}
    env.update(WORKER_SETTINGS)
    env.update(
        DATABASE_URL=session_database_url(),
        CELERY_BROKER_URL=broker_url,
        GATEHOUSE_DEMO_SERVICES_URL=live_server_url,
        SECRET_KEY=settings.SECRET_KEY,
        # Credentials the worker mints are checked by the live server, in this process, with the keys it publishes.
        GATEHOUSE_SIGNING_KEYS=settings.GATEHOUSE_SIGNING_KEYS,
        GATEHOUSE_VAR_DIR=str(folder),
        PYTHONUNBUFFERED="1",
    )
    return env


@contextmanager
def use_broker(url: str) -> Iterator[None]:
    """Point this process's Celery app (what the API enqueues with) at another broker for a while."""
    from config.celery import app

    previous = app.conf.get("broker_write_url")
    _switch_broker(app, url)
    try:
        yield
    finally:
        _switch_broker(app, previous)


def _switch_broker(app: Any, url: str | None) -> None:
    # The write URL, because Celery prefers the CELERY_BROKER_URL variable to a configured broker_url.
    app.conf.broker_write_url = url
    # Connection and producer pools are cached per app; forget them so the next publish uses `url`.
    app._pool = None
    app.amqp._producer_pool = None


def _purge(broker_url: str) -> None:
    """Drop messages earlier runs left in the broker's queue (they name calls that no longer exist)."""
    from config.celery import app

    with app.connection_for_write(broker_url) as connection:
        connection.default_channel.queue_purge("celery")


@pytest.fixture
def start_worker(live_server: Any, tmp_path: Path) -> Iterator[Callable[..., CeleryWorker]]:
    """Return a function that starts a worker (on `broker_url`, default the test broker); all stop at teardown."""
    workers: list[CeleryWorker] = []

    def start(broker_url: str | None = None, **env: str) -> CeleryWorker:
        broker = broker_url or settings.CELERY_BROKER_URL
        folder = tmp_path / f"worker-{len(workers)}"
        folder.mkdir()
        worker = CeleryWorker({**worker_env(live_server.url, broker, folder), **env}, folder)
        workers.append(worker)
        return worker.start()

    _purge(settings.CELERY_BROKER_URL)
    yield start
    for worker in workers:
        worker.stop()


@pytest.fixture(scope="module")
def celery_worker(
    live_server: Any, django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CeleryWorker]:
    """One worker on the test broker for a whole test module (stopped before the next module runs)."""
    folder = tmp_path_factory.mktemp("worker")
    _purge(settings.CELERY_BROKER_URL)
    worker = CeleryWorker(worker_env(live_server.url, settings.CELERY_BROKER_URL, folder), folder).start()
    yield worker
    worker.stop()


class Sequencer:
    """A `manage.py audit_sequencer` process on the test database, in its own process group."""

    def __init__(self, folder: Path, batch: int | None) -> None:
        self.log_path = folder / f"sequencer-{uuid.uuid4().hex[:8]}.log"
        self.batch = batch
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Sequencer:
        """Start it and return once it runs (leading or waiting to lead)."""
        args = [sys.executable, "manage.py", "audit_sequencer"]
        args += ["--batch", str(self.batch)] if self.batch else []
        env = {**os.environ, **WORKER_SETTINGS, "DATABASE_URL": session_database_url(), "PYTHONUNBUFFERED": "1"}
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            args, cwd=BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        wait_until(lambda: b"audit sequencer started" in self.log_path.read_bytes(), timeout=READY_TIMEOUT)
        return self

    def kill(self) -> None:
        """SIGKILL it: no cleanup; its database sessions end with it."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> int | None:
        """SIGTERM it; return its exit status (SIGKILL if it does not stop within 15 s)."""
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            return self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]


@pytest.fixture
def start_sequencer(django_db_setup: None, tmp_path: Path) -> Iterator[Callable[..., Sequencer]]:
    """Return a function that starts an audit sequencer process (`batch` events a transaction); all stop at teardown."""
    started: list[Sequencer] = []

    def start(batch: int | None = None) -> Sequencer:
        started.append(Sequencer(tmp_path, batch))
        return started[-1].start()

    yield start
    for sequencer in started:
        sequencer.stop()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test's own (never the shared one), stopped at teardown."""
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def sink_broker(private_redis: RedisServer) -> Iterator[RedisServer]:
    """Make this process enqueue into a private Redis no worker reads: messages stay there to be counted."""
    with use_broker(private_redis.url):
        yield private_redis


@pytest.fixture
def demo_services(live_server: Any, settings: Any) -> str:
    """Serve the demo downstream from the live server, seeded; return its base URL."""
    from demo.downstream import seed

    settings.GATEHOUSE_DEMO_SERVICES_URL = live_server.url
    seed()
    return live_server.url
