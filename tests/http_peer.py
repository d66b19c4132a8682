"""A plain HTTP API for the `http` tool tests, run as a process of its own.

    python -m tests.http_peer PORT RECORD

Each request is appended to RECORD (one JSON line: method, raw path, headers, body)
*before* it is answered, so a test sees what arrived even when no answer ever left.
The query string steers the answer:

    status=N        answer N with {"message": "refused by the peer"}
    fail_times=N    answer 503 to the first N requests carrying one Idempotency-Key, then succeed
    sleep=S         wait S seconds before answering ...
    sleep_times=N   ... only for the first N requests carrying one Idempotency-Key (default: every one)
    echo=1          succeed with the request's headers in the answer (a downstream that echoes a secret)

Success is 201 {"data": {"refund": {"id": "rf-<n>", "path": …, "body": …}}}.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit


class Peer:
    """What the peer keeps between requests: where it records, and how often it saw each key."""

    def __init__(self, record: Path) -> None:
        self.record = record
        self.lock = threading.Lock()
        self.seen: Counter[str] = Counter()

    def arrived(self, entry: dict[str, Any]) -> int:
        """Record a request; return how many requests with its idempotency key came before it, plus one."""
        with self.lock:
            with self.record.open("a") as handle:
                handle.write(json.dumps(entry) + "\n")
            key = entry["headers"].get("Idempotency-Key", "")
            self.seen[key] += 1
            return self.seen[key]


def handler_for(peer: Peer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.handle_any()

        def do_POST(self) -> None:
            self.handle_any()

        do_PUT = do_PATCH = do_DELETE = do_POST

        def handle_any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length).decode() if length else ""
            headers = dict(self.headers.items())
            entry = {"method": self.command, "path": self.path, "headers": headers, "body": raw}
            nth = peer.arrived(entry)
            query = {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}
            if nth <= int(query.get("sleep_times", "1000000")):
                time.sleep(float(query.get("sleep", "0")))
            if "status" in query:
                self.answer(int(query["status"]), {"message": "refused by the peer"})
            elif nth <= int(query.get("fail_times", "0")):
                self.answer(503, {"message": "try again later"})
            elif query.get("echo"):
                self.answer(200, {"headers": headers})
            else:
                body = json.loads(raw) if raw else None
                self.answer(201, {"data": {"refund": {"id": f"rf-{nth}", "path": self.path, "body": body}}})

        def answer(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the caller gave up waiting
                pass

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the record file is the log

    return Handler


def main(port: int, record: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", port), handler_for(Peer(record)))
    print(f"listening on {port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(int(sys.argv[1]), Path(sys.argv[2]))
