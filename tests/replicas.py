"""Two or more complete sets of Gatehouse's processes on one database and one Redis, as replicas run.

A `ReplicaSet` is one machine's worth of Gatehouse: the Procfile's web server,
worker and beat (and the audit sequencer, once the tree has one), each in a process
group of its own, with its own var folder and port, on the test database that
pytest-django created and the test broker. `replica_processes()` says what a set
runs: adding a process is one line there.

Beside them, `Downstream` is a service speaking the Gatehouse protocol (POST the
tool's URL, `/preview`, `/verify`) that counts the effects it is asked for per
idempotency key, and can hold one resource's first request open: the window in
which a test kills the worker that sent it. `Reviewer` is a person in the console
of one replica, deciding through its forms with their CSRF token.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings

from tests.embedded import EmbeddedStack, procfile
from tests.processes import BASE_DIR, READY_TIMEOUT, http_server, wait_until, worker_env

SEQUENCER_COMMAND = BASE_DIR / "audit" / "management" / "commands" / "audit_sequencer.py"


def has_sequencer() -> bool:
    """Return whether this tree has the audit sequencer (`manage.py audit_sequencer`)."""
    return SEQUENCER_COMMAND.exists()


def replica_processes(name: str) -> dict[str, str]:
    """Return the shell command of each process of replica `name`: the Procfile's, as `make demo` runs them."""
    commands = procfile()
    processes = {
        "web": commands["web"],
        # Named per replica, as two machines' workers would be (the Procfile's default name is the host's).
        "worker": f"{commands['worker']} -n replica-{name}@%h",
        "beat": commands["beat"],
    }
    if has_sequencer():
        processes["sequencer"] = "exec python manage.py audit_sequencer"
    return processes


class ReplicaSet(EmbeddedStack):
    """One replica's processes on the test database and broker; its own var folder and port."""

    def __init__(self, name: str, folder: Path) -> None:
        super().__init__(folder)
        self.name = name
        self.var_dir.mkdir(parents=True, exist_ok=True)
        env = worker_env(self.url, settings.CELERY_BROKER_URL, self.var_dir)
        bin_dir = str(Path(sys.executable).parent)
        env.update(GATEHOUSE_DEMO_PORT=str(self.port), PATH=bin_dir + os.pathsep + env.get("PATH", ""))
        self.env = env

    def start_all(self) -> None:
        """Start every process of the set (without waiting for any)."""
        for process, command in replica_processes(self.name).items():
            self._spawn(process, ["bash", "-c", command])

    def start_process(self, process: str) -> None:
        """Start (again) one process of the set."""
        self._spawn(process, ["bash", "-c", replica_processes(self.name)[process]])

    def wait_until_ready(self) -> None:
        """Return once the web server answers /healthz and the worker consumes."""
        self.wait_until_up(timeout=READY_TIMEOUT)
        self.wait_for_worker()

    def wait_for_worker(self, since: int = 0) -> None:
        """Return once the worker's log says it is ready (after byte `since` of its log)."""
        log = self.folder / "worker.log"

        def ready() -> bool:
            self.assert_alive()
            with log.open("rb") as handle:
                handle.seek(since)
                return b" ready." in handle.read()

        wait_until(ready, timeout=READY_TIMEOUT, interval=0.1)

    def kill(self, process: str) -> None:
        """SIGKILL one process's whole group, as a lost machine would: no cleanup, no acknowledgement."""
        popen = self.processes.pop(process)
        os.killpg(popen.pid, signal.SIGKILL)
        popen.wait(timeout=10)
        self._logs.pop(process).close()

    def restart_worker(self) -> None:
        """Start the worker again, as a supervisor would, and return once it consumes."""
        log = self.folder / "worker.log"
        offset = log.stat().st_size if log.exists() else 0
        self.start_process("worker")
        self.wait_for_worker(since=offset)

    def _spawn(self, name: str, argv: list[str]) -> None:
        # Appending: a restarted process keeps its predecessor's lines above its own.
        log = (self.folder / f"{name}.log").open("ab")
        self._logs[name] = log
        self.processes[name] = subprocess.Popen(
            argv, cwd=BASE_DIR, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


@contextmanager
def replica_sets(folder: Path, names: tuple[str, ...] = ("a", "b")) -> Iterator[list[ReplicaSet]]:
    """Start a replica set per name, all at once; yield them ready; stop whatever still runs at the end."""
    sets = [ReplicaSet(name, folder / f"replica-{name}") for name in names]
    try:
        for replica in sets:
            replica.start_all()
        for replica in sets:
            replica.wait_until_ready()
        yield sets
    finally:
        for replica in sets:
            replica.stop_all()


# ------------------------------------------------------------------ the downstream


class Downstream:
    """What the downstream saw: effects per idempotency key, and who sent a held request."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.effects: Counter[str] = Counter()
        self.held_resource = ""
        self.held_arrived = threading.Event()
        self.release = threading.Event()
        self.held_sender_port = 0

    def hold_first_request_for(self, resource: str) -> None:
        """Keep the first request for `resource` unanswered until `release` is set (at most a minute)."""
        self.held_resource = resource

    def effect(self, key: str, resource: str, sender_port: int) -> int:
        """Count an effect asked for under `key`; return how many were asked for under it, this one included."""
        with self.lock:
            self.effects[key] += 1
            nth = self.effects[key]
        if resource == self.held_resource and nth == 1:
            self.held_sender_port = sender_port
            self.held_arrived.set()
            self.release.wait(timeout=60)
        return nth


def downstream_handler(downstream: Downstream) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            key = self.headers.get("Idempotency-Key", "")
            arguments = body.get("arguments", body)
            resource = str(arguments.get("pedido_id") or arguments.get("order_id") or "")
            if self.path.endswith("/preview"):
                self.answer({"summary": f"Would act on {resource}.", "before": None, "after": None})
            elif self.path.endswith("/verify"):
                seen = downstream.effects[key]
                self.answer({"confirmed": seen > 0, "observed": {"effects": seen}, "detail": "counted"})
            else:
                nth = downstream.effect(key, resource, self.client_address[1])
                self.answer({"resource": resource, "key": key, "nth": nth})

        def answer(self, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # its worker was killed while it waited
                pass

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def serving_downstream() -> Iterator[tuple[str, Downstream]]:
    """Serve a counting downstream from a thread; yield (base URL, what it saw)."""
    downstream = Downstream()
    with http_server(downstream_handler(downstream)) as url:
        try:
            yield url, downstream
        finally:
            downstream.release.set()


def process_holding_connection(local_port: int, remote_port: int, pids: list[int]) -> int | None:
    """Return which of `pids` holds the TCP connection from `local_port` to `remote_port` on loopback."""
    wanted = f":{local_port:04X}", f":{remote_port:04X}"
    inode = None
    tables = [Path(name) for name in ("/proc/net/tcp", "/proc/net/tcp6") if Path(name).exists()]
    for table in tables:
        for line in table.read_text().splitlines()[1:]:
            fields = line.split()
            if fields[1].endswith(wanted[0]) and fields[2].endswith(wanted[1]):
                inode = fields[9]
    if inode is None:
        return None
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                if os.readlink(fd) == f"socket:[{inode}]":
                    return pid
            except OSError:  # closed meanwhile
                continue
    return None


# ------------------------------------------------------------------ a reviewer in one replica's console

CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


class Reviewer:
    """A person logged in to one replica's console, deciding as its forms do (CSRF token included)."""

    def __init__(self, base_url: str, username: str, password: str) -> None:
        self.client = httpx.Client(base_url=base_url, timeout=30)
        page = self.client.get("/accounts/login/")
        token = CSRF.search(page.text)
        assert token, page.text[:500]
        answer = self.client.post(
            "/accounts/login/",
            data={"csrfmiddlewaretoken": token.group(1), "username": username, "password": password},
        )
        assert answer.status_code == 302, answer.text[:500]

    def open(self, call_id: str) -> dict[str, str] | None:
        """Read the call's page; return its Approve form's fields, or None when nothing is left to decide."""
        response = self.client.get(f"/calls/{call_id}/")
        assert response.status_code == 200, response.text[:500]
        form = re.search(r'<form method="post" action="/calls/[^"]+/approve/".*?</form>', response.text, re.S)
        if form is None:
            return None
        return dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form.group(0)))

    def approve(self, call_id: str, fields: dict[str, str]) -> None:
        self._post(f"/calls/{call_id}/approve/", fields)

    def reject(self, call_id: str, fields: dict[str, str], reason: str) -> None:
        self._post(
            f"/calls/{call_id}/reject/", {"csrfmiddlewaretoken": fields["csrfmiddlewaretoken"], "reason": reason}
        )

    def _post(self, path: str, data: dict[str, str]) -> None:
        answer = self.client.post(path, data=data)
        assert answer.status_code in {200, 302}, answer.text[:500]

    def close(self) -> None:
        self.client.close()
