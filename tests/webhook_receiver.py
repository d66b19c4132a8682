"""A webhook consumer, run as its own process: verifies every request with `standardwebhooks`, dedupes on webhook-id.

    python tests/webhook_receiver.py PORT SECRET LOG [--fail-first N] [--hang-first SECONDS]

Each request is one JSON line in LOG: {"id", "verified", "answered", "duplicate", "type", "event", "at"}. A
verified event is processed once per webhook-id (a repeat is answered 200 and marked duplicate), as Standard
Webhooks asks of consumers. --fail-first answers 500 to the first N requests; --hang-first processes the first
request and then holds it open that long before answering (so a sender can die while it waits).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


class Consumer(BaseHTTPRequestHandler):
    """The consumer; its settings and what it has processed are class attributes, shared by the server's threads."""

    verifier: ClassVar[Webhook]
    log_path: ClassVar[str]
    fail_first: ClassVar[int] = 0
    hang_first: ClassVar[float] = 0.0
    lock: ClassVar[threading.Lock] = threading.Lock()
    requests: ClassVar[int] = 0
    processed: ClassVar[set[str]] = set()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        with self.lock:
            Consumer.requests += 1
            number = Consumer.requests
        try:
            event = self.verifier.verify(body, dict(self.headers))
        except WebhookVerificationError:
            self._answer(401, {"verified": False, "answered": 401})
            return
        line = {"id": self.headers["webhook-id"], "verified": True, "type": event.get("type"), "event": event}
        if number <= self.fail_first:
            self._answer(500, {**line, "answered": 500, "duplicate": False})
            return
        with self.lock:
            duplicate = line["id"] in self.processed
            self.processed.add(line["id"])
        if number == 1 and self.hang_first:
            self._log({**line, "answered": "hanging", "duplicate": duplicate})
            time.sleep(self.hang_first)
        self._answer(200, {**line, "answered": 200, "duplicate": duplicate})

    def _answer(self, status: int, line: dict[str, Any]) -> None:
        self._log(line)
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()

    def _log(self, line: dict[str, Any]) -> None:
        with self.lock, open(self.log_path, "a") as handle:
            handle.write(json.dumps({**line, "at": time.time()}) + "\n")

    def log_message(self, *args: object) -> None:
        return


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("secret")
    parser.add_argument("log")
    parser.add_argument("--fail-first", type=int, default=0)
    parser.add_argument("--hang-first", type=float, default=0.0)
    options = parser.parse_args()
    Consumer.verifier, Consumer.log_path = Webhook(options.secret), options.log
    Consumer.fail_first, Consumer.hang_first = options.fail_first, options.hang_first
    ThreadingHTTPServer(("127.0.0.1", options.port), Consumer).serve_forever()
