"""Sensitive arguments: masked wherever they are read, bound by a keyed hash, real only for the executor.

The end-to-end test runs the product as it runs in production: a web process (uvicorn on
config.asgi, its log captured), a Celery worker process, and a downstream HTTP service
that records what it receives. A call whose sensitive arguments carry unique markers goes
through hold, a reviewer's edit in the console, another reviewer's approval and execution,
with reviewers mailed at each step (a real SMTP server process); then every page, API and
MCP answer, mail, log line and a pg_dump of the whole database is searched: the markers
appear only in the downstream's own record.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import Message
from html import unescape
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from django.contrib.auth.models import Permission, User
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from agents.provisioning import create_or_update_agent
from approvals import sensitive as call_secrets
from approvals.models import Decision, ToolCall
from notifications.models import Channel, Kind, Route
from tests.notification_peers import SmtpServer
from tests.processes import BASE_DIR, free_port, http_server, session_database_url, wait_until
from toolcatalog import sensitive
from toolcatalog.models import RiskTier, Tool
from toolcatalog.schema import argument_errors, compile_validator
from vault.hashing import HASH_KEY_NAME
from vault.models import Secret

MASK, MASK_CHANGED = "•••• (set)", "•••• (changed)"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "invoice_id": {"type": "string", "pattern": "^INV-[0-9]+$"},
        "amount_centavos": {"type": "integer", "minimum": 1},
        "card": {
            "type": "object",
            "properties": {
                "holder": {"type": "string"},
                "token": {"type": "string", "minLength": 8, "x-gatehouse-sensitive": True},
            },
            "required": ["holder", "token"],
        },
        "pin": {"type": "string", "minLength": 4, "writeOnly": True},
    },
    "required": ["invoice_id", "amount_centavos", "card", "pin"],
    "additionalProperties": False,
}


# ------------------------------------------------------------------ the schema's marks, without a database


def test_sensitive_places_are_found_at_any_depth() -> None:
    schema = {
        "properties": {
            "a": {"type": "string", "writeOnly": True},
            "b": {"properties": {"c": {"x-gatehouse-sensitive": True}, "d": {"type": "string"}}},
            "e": {"type": "array", "items": {"properties": {"f": {"writeOnly": True}}}},
            "g": {"x-gatehouse-sensitive": False},
        },
        "allOf": [{"properties": {"h": {"writeOnly": True}}}],
    }
    arguments = {"a": "1", "b": {"c": "2", "d": "3"}, "e": [{"f": "4"}, {"x": "5"}, {"f": "6"}], "g": "7"}

    assert sensitive.sensitive_patterns(schema) == [("a",), ("b", "c"), ("e", "*", "f"), ("h",)]
    assert sensitive.sensitive_paths(schema, arguments) == [("a",), ("b", "c"), ("e", 0, "f"), ("e", 2, "f")]
    assert sensitive.mask_with_schema(schema, arguments) == {
        "a": MASK,
        "b": {"c": MASK, "d": "3"},
        "e": [{"f": MASK}, {"x": "5"}, {"f": MASK}],
        "g": "7",
    }
    assert arguments["a"] == "1"  # masking copies


def test_a_changed_value_reads_changed_and_an_unchanged_one_set() -> None:
    before = {"pin": "hmac-sha256:aa", "card": {"token": "hmac-sha256:bb"}}
    after = {"pin": "hmac-sha256:cc", "card": {"token": "hmac-sha256:bb"}}
    schema = {
        "properties": {
            "pin": {"writeOnly": True},
            "card": {"properties": {"token": {"x-gatehouse-sensitive": True}}},
        }
    }

    assert sensitive.mask_with_schema(schema, after, before) == {"pin": MASK_CHANGED, "card": {"token": MASK}}


def test_a_pointer_survives_slashes_and_tildes_in_names() -> None:
    arguments = {"a/b": {"~c": ["x", "y"]}}
    path = ("a/b", "~c", 1)

    assert sensitive.pointer(path) == "/a~1b/~0c/1"
    assert sensitive.parse_pointer("/a~1b/~0c/1", arguments) == path
    assert sensitive.reveal({"a/b": {"~c": ["x", "masked"]}}, {"/a~1b/~0c/1": "y"}) == arguments


def test_scrub_masks_any_string_holding_a_secret() -> None:
    answer = {"echo": {"pin": "s3cr3t-pin"}, "note": "paid with s3cr3t-pin today", "amount": 5, "list": ["ok"]}

    assert sensitive.scrub(answer, ["s3cr3t-pin"]) == {
        "echo": {"pin": MASK},
        "note": MASK,
        "amount": 5,
        "list": ["ok"],
    }


# ------------------------------------------------------------------ the keyed hash


@pytest.mark.django_db
def test_the_stored_hash_is_keyed_stable_and_not_a_plain_digest() -> None:
    value = "1234"

    first, second = sensitive.hashed(value), sensitive.hashed(value)

    assert first == second != sensitive.hashed("1235")
    assert first.startswith("hmac-sha256:")
    assert hashlib.sha256(b'"1234"').hexdigest() not in first  # not reversible by hashing guesses
    assert Secret.objects.filter(name=HASH_KEY_NAME).count() == 1


# ------------------------------------------------------------------ end to end, real processes


@dataclass
class Downstream:
    """The service the tool acts on: it keeps its own record of every request, and echoes what it got."""

    url: str
    received: list[tuple[str, str]] = field(default_factory=list)

    def record_text(self) -> str:
        return "\n".join(body for _, body in self.received)


def downstream_handler(downstream_record: list[tuple[str, str]]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
            downstream_record.append((self.path, body))
            sent = json.loads(body)
            if self.path.endswith("/preview"):
                answer: dict[str, Any] = {"summary": "Would pay the invoice.", "before": None, "after": sent}
            elif self.path.endswith("/verify"):
                answer = {"confirmed": True, "observed": {"paid": sent["arguments"]}, "detail": "paid"}
            else:
                # A careless downstream: its answer echoes the card and PIN it was sent.
                answer = {"paid": True, "echo": sent, "note": f"charged card {sent['card']['token']}"}
            payload = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


@pytest.fixture
def downstream() -> Iterator[Downstream]:
    received: list[tuple[str, str]] = []
    with http_server(downstream_handler(received)) as url:
        yield Downstream(f"{url}/pay", received)


@dataclass
class WebProcess:
    url: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture
def web(tmp_path: Path, transactional_db: None) -> Iterator[WebProcess]:
    """The product's web process (uvicorn on config.asgi: the API, MCP and the console) on the test database."""
    port = free_port()
    log_path = tmp_path / "web.log"
    env = {**os.environ, "DATABASE_URL": session_database_url(), "LOG_LEVEL": "DEBUG", "PYTHONUNBUFFERED": "1"}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "config.asgi:application", "--port", str(port), "--log-level", "debug"],
            cwd=BASE_DIR,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _answers(url), timeout=40)
        yield WebProcess(url, log_path)
    finally:
        process.terminate()
        process.wait(timeout=15)


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code < 500
    except httpx.HTTPError:
        return False


class Forms(HTMLParser):
    """The forms of a page: for each, its action and the values it would submit."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.forms: list[tuple[str, dict[str, str]]] = []
        self.inputs: list[dict[str, str]] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: unescape(value or "") for name, value in attrs}
        if tag == "form":
            self.forms.append((values.get("action", ""), {}))
        elif tag == "input" and self.forms and "name" in values and self._submitted(values):
            self.forms[-1][1][values["name"]] = values.get("value", "")
        if tag == "input":
            self.inputs.append(values)

    @staticmethod
    def _submitted(values: dict[str, str]) -> bool:
        """A browser sends a checkbox or radio button only when it is checked."""
        return values.get("type") not in ("checkbox", "radio") or "checked" in values

    def form(self, action_suffix: str, having: str = "") -> dict[str, str]:
        return next(v for action, v in self.forms if action.endswith(action_suffix) and (not having or having in v))


class Console:
    """A reviewer's browser session against the web process (CSRF and all)."""

    def __init__(self, url: str, username: str, password: str, pages: list[str]) -> None:
        self.http = httpx.Client(base_url=url, timeout=30)
        self.pages = pages
        login = Forms(self.get("/accounts/login/")).form("")
        answer = self.http.post(
            "/accounts/login/", data={**login, "username": username, "password": password}, headers=self._referer()
        )
        assert answer.status_code == 302, answer.text[:500]

    def _referer(self) -> dict[str, str]:
        return {"Referer": str(self.http.base_url)}

    def get(self, path: str) -> str:
        answer = self.http.get(path)
        assert answer.status_code == 200, (path, answer.status_code)
        self.pages.append(answer.text)
        return answer.text

    def post(self, path: str, data: dict[str, str]) -> httpx.Response:
        token = self.http.cookies.get("csrftoken") or ""
        answer = self.http.post(path, data={"csrfmiddlewaretoken": token, **data}, headers=self._referer())
        self.pages.append(answer.text)
        return answer


def reviewer(name: str, *, superuser: bool = False) -> User:
    if superuser:
        return User.objects.create_superuser(name, password="pw-" + name)
    user = User.objects.create_user(name, password="pw-" + name)
    user.user_permissions.add(Permission.objects.get(codename="review_toolcall"))
    return user


def pay_invoice_tool(url: str) -> Tool:
    from demo.management.commands.seed_demo import seed_tiers

    seed_tiers()
    return Tool.objects.create(
        name="pay_invoice",
        title="Pay an invoice",
        description="Pay an invoice with a card; the card's token and the PIN are secrets.",
        input_schema=SCHEMA,
        base_tier=RiskTier.objects.get(level=2),
        executor_kind="gatehouse_protocol",
        executor_ref=url,
        resource_argument="invoice_id",
        read_only_hint=False,
        idempotent_hint=True,
    )


def mcp_status(url: str, token: str, call_id: str) -> str:
    async def ask() -> str:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http,
            Client(streamable_http_client(f"{url}/mcp", http_client=http), mode="auto") as client,
        ):
            result = await client.call_tool("get_call_status", {"call_id": call_id})
            return result.model_dump_json()

    return asyncio.run(ask())


def pg_dump() -> str:
    result = subprocess.run(
        ["pg_dump", "--no-owner", session_database_url()], capture_output=True, text=True, timeout=120, check=True
    )
    return result.stdout


def test_sensitive_values_reach_the_downstream_and_nowhere_else(
    web: WebProcess, downstream: Downstream, start_worker: Any, smtp_server: SmtpServer
) -> None:
    token_marker, old_pin, new_pin = (f"{kind}-{uuid.uuid4().hex}" for kind in ("tok", "pin", "newpin"))
    markers = (token_marker, old_pin, new_pin)
    pay_invoice_tool(downstream.url)
    _, agent_token = create_or_update_agent("billing-agent", {"pay_invoice": 3})
    reviewer("alice"), reviewer("bob"), reviewer("root", superuser=True)
    # Reviewers are mailed (a real SMTP server process) of the held call, its decision and its outcome.
    mailed = Channel.objects.create(name="reviewers-mail", kind=Kind.EMAIL, email_to=["reviewers@example.com"])
    Route.objects.create(channel=mailed, min_tier=2)
    worker = start_worker(LOG_LEVEL="DEBUG", EMAIL_URL=smtp_server.url)  # every line it can write is searched
    answers: list[str] = []
    agent = httpx.Client(base_url=web.url, headers={"Authorization": f"Bearer {agent_token}"}, timeout=30)
    arguments = {
        "invoice_id": "INV-42",
        "amount_centavos": 12345,
        "card": {"holder": "Ana", "token": token_marker},
        "pin": old_pin,
    }
    proposal = {"tool": "pay_invoice", "arguments": arguments, "idempotency_key": "invoice-42"}

    # Held for a reviewer; a replay with the same values is the same call, other values a conflict.
    held = agent.post("/api/v1/tool-calls", json=proposal)
    replay = agent.post("/api/v1/tool-calls", json=proposal)
    conflict = agent.post("/api/v1/tool-calls", json={**proposal, "arguments": {**arguments, "pin": "0000-other"}})
    answers += [held.text, replay.text, conflict.text]
    assert held.status_code == 202, held.text  # accepted, held for a reviewer
    call_id = held.json()["id"]
    assert held.json()["status"] == "pending_approval"
    assert held.json()["arguments"] == {**arguments, "card": {"holder": "Ana", "token": MASK}, "pin": MASK}
    assert (replay.status_code, replay.json()["id"]) == (200, call_id)
    assert (conflict.status_code, conflict.json()["error"]) == (409, "idempotency_conflict")
    stored = ToolCall.objects.get(pk=call_id)
    assert stored.arguments["pin"].startswith("hmac-sha256:")
    assert stored.arguments["card"]["token"].startswith("hmac-sha256:")

    # Alice opens it (the dry run goes downstream with hashes, not values), edits the amount and types a new PIN.
    pages: list[str] = []
    alice = Console(web.url, "alice", "pw-alice", pages)
    alice.get("/")
    alice.get(f"/calls/{call_id}/")
    alice.get(f"/calls/{call_id}/preview/")
    edit_page = Forms(alice.get(f"/calls/{call_id}/edit/"))
    pin_input = next(i for i in edit_page.inputs if i.get("name") == "pin")
    assert pin_input["type"] == "password" and "value" not in pin_input and MASK in pin_input["placeholder"]
    typed = {
        "base_hash": stored.arguments_hash,
        "invoice_id": "INV-42",
        "amount_centavos": "12000",
        "card": json.dumps({"holder": "Ana", "token": MASK}, ensure_ascii=False),
        "pin": new_pin,
    }
    review = alice.post(f"/calls/{call_id}/edit/", typed)
    assert review.status_code == 200 and MASK_CHANGED in review.text, review.text[-3000:]
    confirm = Forms(review.text).form("/edit/", having="confirm")
    assert confirm["pin"].startswith("sealed:")  # carried to the confirmation sealed, never as typed
    confirmed = alice.post(f"/calls/{call_id}/edit/", confirm)
    assert confirmed.status_code == 302, confirmed.text[-3000:]
    edited = ToolCall.objects.get(pk=call_id)
    assert edited.arguments["amount_centavos"] == 12000
    assert edited.arguments["card"]["token"] == stored.arguments["card"]["token"]  # kept: same keyed hash
    assert edited.arguments["pin"] != stored.arguments["pin"]
    alice.get(f"/calls/{call_id}/")

    # Bob approves exactly what he was shown; a real worker runs it.
    bob = Console(web.url, "bob", "pw-bob", pages)
    approve = Forms(bob.get(f"/calls/{call_id}/")).form("/approve/")
    assert approve["arguments_hash"] == edited.arguments_hash
    assert bob.post(f"/calls/{call_id}/approve/", approve).status_code == 302
    settled = wait_until(lambda: _settled(agent, call_id), timeout=60)
    answers.append(json.dumps(settled))
    assert settled["status"] == "succeeded", (settled, worker.log())
    # The downstream echoed the values in its answer: stored and shown scrubbed.
    assert settled["result"]["note"] == MASK
    assert settled["result"]["echo"]["pin"] == MASK and settled["result"]["echo"]["card"]["token"] == MASK
    assert Decision.objects.get(call_id=call_id, kind="approve").arguments_hash == edited.arguments_hash

    # The downstream got the real values (the new PIN, the kept token); its previews got neither.
    executed = [json.loads(body) for path, body in downstream.received if path == "/pay"]
    assert executed == [{**arguments, "amount_centavos": 12000, "pin": new_pin}]
    previews = [body for path, body in downstream.received if path.endswith("/preview")]
    assert previews and not any(marker in body for body in previews for marker in markers)
    assert old_pin not in downstream.record_text()

    # Settled: the values are erased, and the audit chain still verifies.
    assert not Secret.objects.filter(name=call_secrets.secret_name(call_id)).exists()
    verify = subprocess.run(
        [sys.executable, "manage.py", "audit_verify"],
        cwd=BASE_DIR,
        env={**os.environ, "DATABASE_URL": session_database_url()},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr

    # Everything a person or another system can read after settlement.
    answers += [agent.get(f"/api/v1/tool-calls/{call_id}").text, mcp_status(web.url, agent_token, call_id)]
    root = Console(web.url, "root", "pw-root", pages)
    for path in ("/", "/activity/", "/overview/", f"/calls/{call_id}/", "/audit/", "/audit/export.jsonl"):
        root.get(path)
    root.get(f"/admin/approvals/toolcall/{call_id}/change/")
    root.get("/admin/approvals/toolcall/")
    root.get("/admin/audit/event/")
    places = {
        "answers": "\n".join(answers),
        "pages": "\n".join(pages),
        "web log": web.log(),
        "worker log": worker.log_path.read_text(errors="replace"),
        "mail": "\n".join(message.as_string() for message in wait_until(lambda: _mails(smtp_server, 3))),
        "database dump": pg_dump(),
    }
    # Each place really holds what it should: the call, its events, the worker's task, the vault's table.
    # (A mail links to the call through a signed token, not its id.)
    assert [place for place, text in places.items() if call_id not in text] == ["worker log", "mail"]
    assert "pay_invoice" in places["mail"] and "Approval needed" in places["mail"]
    assert "approvals.tasks.execute_call" in places["worker log"]
    assert "vault_secret" in places["database dump"] and "call.succeeded" in places["database dump"]
    found = {(place, marker) for place, text in places.items() for marker in markers if marker in text}
    assert found == set()
    assert MASK in places["pages"] and MASK_CHANGED in places["pages"]
    assert "hmac-sha256:" in places["database dump"]  # the audit log keeps the keyed hashes
    assert token_marker in downstream.record_text() and new_pin in downstream.record_text()


def _mails(smtp_server: SmtpServer, count: int) -> list[Message] | None:
    """The mails received, once there are `count` (pending, decided, succeeded)."""
    received = smtp_server.messages()
    return received if len(received) >= count else None


def _settled(agent: httpx.Client, call_id: str) -> dict[str, Any] | None:
    body: dict[str, Any] = agent.get(f"/api/v1/tool-calls/{call_id}").json()
    return body if body["status"] in {"succeeded", "failed", "needs_reconciliation"} else None


@pytest.mark.django_db
def test_an_edit_that_leaves_the_mask_keeps_the_value_and_a_blank_top_level_field_too(catalog: Any) -> None:
    tool = pay_invoice_tool("http://127.0.0.1:9/pay")
    call = ToolCall(tool=tool, arguments={})
    call.arguments, values = call_secrets.split(tool, {"card": {"holder": "A", "token": "tok-1234567"}, "pin": "9876"})
    call.pk = uuid.uuid4()

    typed = {"card": {"holder": "B", "token": MASK}, "invoice_id": "INV-1"}
    call_secrets.keep(call, values)  # the vault row needs no call row: it is named after the call

    assert call_secrets.edited(call, typed) == {
        "card": {"holder": "B", "token": "tok-1234567"},
        "invoice_id": "INV-1",
        "pin": "9876",
    }
    assert call_secrets.edited(call, {**typed, "pin": "1111"})["pin"] == "1111"


def test_a_schema_error_never_quotes_a_sensitive_value() -> None:
    schema = {
        "type": "object",
        "properties": {
            "pin": {"type": "string", "writeOnly": True, "not": {"pattern": "^0000"}},
            "note": {"type": "string", "not": {"pattern": "^0000"}},
        },
        "not": {"required": ["pin", "note"], "properties": {"pin": {"const": "0000-pin-value"}}},
    }

    problems = argument_errors(compile_validator(schema), {"pin": "0000-pin-value", "note": "0000-note"})

    assert "0000-pin-value" not in json.dumps(problems)
    assert "0000-note" in json.dumps(problems)  # an ordinary value is still quoted, as before


@pytest.mark.django_db
def test_a_refused_proposal_keeps_no_sensitive_value(catalog: Any) -> None:
    from django.test import Client

    from audit.models import Event

    pay_invoice_tool("http://127.0.0.1:9/pay")
    _, token = create_or_update_agent("billing-agent", {"pay_invoice": 3})
    marker = f"short-{uuid.uuid4().hex}"
    bad = {"invoice_id": "nope", "amount_centavos": 1, "card": {"holder": "A", "token": marker[:7]}, "pin": marker}
    body = {"tool": "pay_invoice", "arguments": bad, "idempotency_key": "bad-1"}

    answer = Client().post(
        "/api/v1/tool-calls", json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )

    assert answer.status_code == 422, answer.content
    assert marker[:7] not in answer.content.decode()
    stored = ToolCall.objects.get(tool__name="pay_invoice")
    assert stored.status == "refused"
    everything = json.dumps([stored.arguments, stored.error, list(Event.objects.values_list("data", flat=True))])
    assert marker not in everything and marker[:7] not in everything
    assert not Secret.objects.filter(name=call_secrets.secret_name(stored.pk)).exists()
