"""The peers notifications talk to, as real processes: an aiosmtpd SMTP server and a webhook consumer.

Also a Slack Web API stand-in (chat.postMessage, chat.update, users.info and response_url
posts, in slack_sdk's shape) served from a thread, and the shared key secrets are stored
under, so a worker process reads the channels this process wrote.
"""

from __future__ import annotations

import json
import mailbox
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from email.message import Message
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import pytest
from cryptography.fernet import Fernet

from tests.processes import BASE_DIR, free_port, http_server, wait_until


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class PeerProcess:
    """A server process on a loopback port that a test may stop and start again."""

    def __init__(self, args: list[str], port: int, log: Path) -> None:
        self.args, self.port, self.log = args, port, log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> PeerProcess:
        output = self.log.open("ab")
        self.process = subprocess.Popen(self.args, cwd=BASE_DIR, stdout=output, stderr=subprocess.STDOUT)
        wait_until(lambda: _listening(self.port), timeout=15)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self.process = None


class SmtpServer(PeerProcess):
    """`python -m aiosmtpd` with its Mailbox handler: every message it receives lands in a Maildir."""

    def __init__(self, folder: Path) -> None:
        self.maildir = folder / "maildir"
        port = free_port()
        args = [sys.executable, "-m", "aiosmtpd", "-n", "-l", f"127.0.0.1:{port}"]
        super().__init__([*args, "-c", "aiosmtpd.handlers.Mailbox", str(self.maildir)], port, folder / "smtp.log")

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.port}"

    def messages(self) -> list[Message]:
        if not self.maildir.exists():
            return []
        return [message for _, message in mailbox.Maildir(self.maildir, create=False).iteritems()]


class WebhookReceiver(PeerProcess):
    """tests/webhook_receiver.py: verifies every signature with standardwebhooks and logs each request."""

    def __init__(self, folder: Path, secret: str, *options: str) -> None:
        port = free_port()
        self.requests_log = folder / f"webhook-{port}.jsonl"
        script = str(BASE_DIR / "tests" / "webhook_receiver.py")
        args = [sys.executable, script, str(port), secret, str(self.requests_log), *options]
        super().__init__(args, port, folder / f"webhook-{port}.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks"

    def requests(self) -> list[dict[str, Any]]:
        if not self.requests_log.exists():
            return []
        return [json.loads(line) for line in self.requests_log.read_text().splitlines() if line.strip()]

    def processed(self) -> list[dict[str, Any]]:
        """Return the events the consumer acted on: verified, answered 200, not a repeat of a processed id."""
        return [line for line in self.requests() if line.get("answered") in (200, "hanging") and not line["duplicate"]]


@pytest.fixture
def smtp_server(tmp_path: Path) -> Iterator[SmtpServer]:
    server = SmtpServer(tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def webhook_receiver(tmp_path: Path) -> Iterator[Callable[..., WebhookReceiver]]:
    """Return start(secret, *options, running=True) → a receiver (not yet started if not running); all stop at
    teardown."""
    started: list[WebhookReceiver] = []

    def start(secret: str, *options: str, running: bool = True) -> WebhookReceiver:
        receiver = WebhookReceiver(tmp_path, secret, *options)
        started.append(receiver)
        if running:
            receiver.start()
        return receiver

    yield start
    for receiver in started:
        receiver.stop()


@pytest.fixture
def secrets_key(settings: Any) -> dict[str, str]:
    """Store secrets under one key this process and its workers share; return the workers' environment for it."""
    key = Fernet.generate_key().decode()
    settings.GATEHOUSE_SECRETS_KEYS = [key]
    return {"GATEHOUSE_SECRETS_KEYS": key}


class SlackApi:
    """What a Slack Web API stand-in received: each call as (method, JSON body, headers)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any], dict[str, str]]] = []
        self.users: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.url = ""

    def of(self, method: str) -> list[dict[str, Any]]:
        with self.lock:
            return [body for name, body, _ in self.calls if name == method]


def _slack_handler(api: SlackApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0)).decode()
            method = self.path.strip("/").split("/")[-1]
            try:
                body = json.loads(raw) if raw.startswith("{") else dict(parse_qsl(raw))
            except ValueError:
                body = {"raw": raw}
            with api.lock:
                api.calls.append((method, body, dict(self.headers)))
            self._json(_answer(api, method, body))

        def _json(self, value: dict[str, Any]) -> None:
            data = json.dumps(value).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            return

    return Handler


def _answer(api: SlackApi, method: str, body: dict[str, Any]) -> dict[str, Any]:
    if method == "chat.postMessage":
        with api.lock:
            ts = f"1700000000.{len(api.calls):06d}"
        return {"ok": True, "channel": body.get("channel"), "ts": ts, "message": {"text": body.get("text")}}
    if method == "chat.update":
        return {"ok": True, "channel": body.get("channel"), "ts": body.get("ts")}
    if method == "users.info":
        user = api.users.get(str(body.get("user")))
        return {"ok": True, "user": user} if user else {"ok": False, "error": "user_not_found"}
    return {"ok": True}


@pytest.fixture
def slack_api() -> Iterator[SlackApi]:
    """A Slack Web API stand-in on a loopback port; its `url` is the base_url slack_sdk is given."""
    api = SlackApi()
    with http_server(_slack_handler(api)) as base:
        api.url = f"{base}/api/"
        yield api
