"""Plain HTTP APIs as tools (executor kind `http`), against a real HTTP service process and a real Celery worker.

The peer (tests/http_peer.py) records every request before answering it, so what
arrived is known even when no answer left; its query string makes it refuse, fail
for a while, hang or echo. Tools are configured through admin as a person does.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import pytest
from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client

from approvals.models import ToolCall
from audit.models import Event
from audit.sequencer import seal_all
from tests.admin_client import AdminBrowser
from tests.conftest import AgentApi
from tests.processes import BASE_DIR, CeleryWorker, _purge, free_port, wait_until, worker_env
from toolcatalog.executors import PermanentError
from toolcatalog.executors.httpapi import fill_template, fill_url, parse_statuses, url_template_problems
from toolcatalog.models import ExecutorKind, HttpEndpoint, HttpHeader, RiskTier, Tool
from vault import signing

pytestmark = pytest.mark.worker

MASK = "•••• (set)"
TERMINAL = {"succeeded", "failed", "needs_reconciliation"}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string", "minLength": 1},
        "amount": {"type": "integer", "minimum": 1},
        "note": {"type": "string"},
    },
    "required": ["order_id", "amount"],
    "additionalProperties": False,
}


# ------------------------------------------------------------------ the peer and the worker


@dataclass
class HttpPeer:
    url: str
    record: Path

    def requests(self) -> list[dict[str, Any]]:
        """Return every request the peer received, in order."""
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines() if line]


@pytest.fixture
def http_peer(tmp_path: Path) -> Iterator[HttpPeer]:
    """A real HTTP service process (tests/http_peer.py) on a free port; stopped at teardown."""
    port, record = free_port(), tmp_path / "peer.jsonl"
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.http_peer", str(port), str(record)],
        cwd=BASE_DIR,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert process.stdout is not None
    assert process.stdout.readline().startswith(b"listening"), "the peer did not start"
    yield HttpPeer(f"http://127.0.0.1:{port}", record)
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture(scope="module")
def debug_worker(
    live_server: Any, django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CeleryWorker]:
    """One worker for the module, logging at DEBUG: every line it can write is searched for secrets."""
    folder = tmp_path_factory.mktemp("http-worker")
    _purge(settings.CELERY_BROKER_URL)
    env = {**worker_env(live_server.url, settings.CELERY_BROKER_URL, folder), "LOG_LEVEL": "DEBUG"}
    worker = CeleryWorker(env, folder).start()
    yield worker
    worker.stop()


def http_tool(
    name: str,
    template: str,
    *,
    tier: int = 1,
    headers: dict[str, str] | None = None,
    secrets: dict[str, str] | None = None,
    idempotent: bool = False,
    **endpoint: Any,
) -> Tool:
    """Create an `http` tool (as admin would save it) with its request and headers."""
    tool = Tool.objects.create(
        name=name,
        description=f"{name} through a plain HTTP API",
        input_schema=SCHEMA,
        base_tier=RiskTier.objects.get(level=tier),
        executor_kind=ExecutorKind.HTTP,
        executor_ref=template,
        resource_argument="order_id",
        idempotent_hint=idempotent,
    )
    HttpEndpoint.objects.create(tool=tool, **endpoint)
    for header, value in (headers or {}).items():
        HttpHeader.objects.create(tool=tool, name=header, value=value)
    for header, secret in (secrets or {}).items():
        HttpHeader.objects.create(tool=tool, name=header, secret=secret)
    return tool


def settled(call_id: str, timeout: float = 30) -> ToolCall:
    return wait_until(lambda: ToolCall.objects.filter(pk=call_id, status__in=TERMINAL).first(), timeout=timeout)


def propose(api: AgentApi, tool: str, key: str, **arguments: Any) -> str:
    body = {"tool": tool, "arguments": {"order_id": "A/7 b", "amount": 1500, **arguments}, "idempotency_key": key}
    response = api.propose(body)
    assert response.status_code in (200, 201, 202), response.content
    call_id: str = response.json()["id"]
    return call_id


# ------------------------------------------------------------------ the template language, without processes


def test_url_arguments_are_percent_encoded_and_cannot_change_the_path() -> None:
    template = "https://api.example/orders/{order_id}/notes?q={note}&n={amount}"

    url = fill_url(template, {"order_id": "A/7 b", "note": "x&y=z", "amount": 5})

    assert url == "https://api.example/orders/A%2F7%20b/notes?q=x%26y%3Dz&n=5"
    for bad in ("..", ".", ""):
        with pytest.raises(PermanentError, match="change the URL's path"):
            fill_url(template, {"order_id": bad, "note": "", "amount": 1})
    with pytest.raises(PermanentError, match="does not have"):
        fill_url(template, {"order_id": "1"})


def test_a_template_is_refused_when_it_names_a_missing_argument_or_puts_one_in_the_origin() -> None:
    properties = {"order_id": {"type": "string"}, "amount": {"type": "integer"}, "pin": {"writeOnly": True}}

    assert url_template_problems("https://api.example/orders/{order_id}", properties) == []
    assert url_template_problems("https://api.example/orders/{pedido}", properties) == [
        "{pedido} names no property of the input schema."
    ]
    assert "origin" in url_template_problems("https://{order_id}.example/x", properties)[0]
    assert "origin" in url_template_problems("https://api.example:{amount}/x", properties)[0]
    assert "absolute" in url_template_problems("/orders/{order_id}", properties)[0]
    assert url_template_problems("https://api.example/orders/{order_id}?pin={pin}", properties) == [
        "{pin} is a sensitive argument: send it in the body, not the URL."
    ]


def test_a_body_template_keeps_types_and_leaves_out_what_the_call_lacks() -> None:
    template = {"order": "{order_id}", "cents": "{amount}", "note": "{note}", "currency": "BRL", "tags": ["{amount}"]}

    assert fill_template(template, {"order_id": "A1", "amount": 5}) == {
        "order": "A1",
        "cents": 5,
        "currency": "BRL",
        "tags": [5],
    }


def test_permanent_statuses_take_numbers_and_ranges() -> None:
    assert parse_statuses("400-402, 501") == frozenset({400, 401, 402, 501})
    with pytest.raises(ValueError, match="not within"):
        parse_statuses("499-400")
    with pytest.raises(ValueError, match="not a status"):
        parse_statuses("4xx")


@pytest.mark.django_db(transaction=True)
def test_the_migration_renames_tools_stored_as_http_to_the_three_route_protocol() -> None:
    before, executor = [("toolcatalog", "0002_tool_audience")], MigrationExecutor(connection)
    executor.migrate(before)  # back to when `http` meant the three-route protocol
    old = executor.loader.project_state(before).apps
    tier = old.get_model("toolcatalog", "RiskTier").objects.create(level=0, name="read")
    fields = {"description": "", "input_schema": {}, "base_tier": tier, "executor_ref": "/demo-services/tools/t"}
    old.get_model("toolcatalog", "Tool").objects.create(name="legacy", executor_kind="http", **fields)
    old.get_model("toolcatalog", "Tool").objects.create(name="local", executor_kind="python", **fields)

    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

    kinds = dict(Tool.objects.values_list("name", "executor_kind"))
    assert kinds == {"legacy": ExecutorKind.GATEHOUSE_PROTOCOL, "local": ExecutorKind.PYTHON}


# ------------------------------------------------------------------ admin: configured as a person does it


def admin_fields(name: str, template: str, tier: RiskTier) -> dict[str, Any]:
    return {
        "name": name,
        "description": "Refund an order through the payments API.",
        "input_schema": json.dumps(SCHEMA),
        "base_tier": tier.pk,
        "executor_kind": "http",
        "executor_ref": template,
        "resource_argument": "order_id",
        "http_endpoint-TOTAL_FORMS": 1,
        "http_endpoint-0-method": "POST",
        "http_endpoint-0-body": "template",
        "http_endpoint-0-body_template": json.dumps({"order": "{order_id}", "cents": "{amount}", "currency": "BRL"}),
        "http_endpoint-0-result_pointer": "/data/refund",
        "http_endpoint-0-permanent_statuses": "",
        "http_endpoint-0-timeout_seconds": 5,
    }


@pytest.mark.django_db
def test_admin_refuses_a_template_or_body_naming_an_argument_the_schema_lacks(catalog: dict[str, Tool]) -> None:
    admin = AdminBrowser()
    fields = admin_fields("refund_api", "https://pay.example/orders/{pedido}/refunds", RiskTier.objects.get(level=1))
    fields["http_endpoint-0-body_template"] = json.dumps({"cents": "{valor}"})

    response = admin.submit("/admin/toolcatalog/tool/add/", fields, "tool_form")

    assert response.status_code == 200
    page = response.content.decode()
    assert "{pedido} names no property of the input schema." in page
    assert "&quot;{valor}&quot; names no property of the input schema." in page
    assert not Tool.objects.filter(name="refund_api").exists()
    # A three-route tool's page has no HTTP request to configure.
    protocol_page = admin.get(f"/admin/toolcatalog/tool/{catalog['emitir_estorno'].pk}/change/").content.decode()
    assert "Gatehouse protocol (three routes)" in protocol_page and "HTTP headers" not in protocol_page


def test_the_templated_request_carries_the_secret_header_and_the_idempotency_key_and_the_secret_leaks_nowhere(
    debug_worker: CeleryWorker,
    http_peer: HttpPeer,
    agent_api: Callable[..., AgentApi],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    api_key, own_authorization = f"sk-live-{uuid.uuid4().hex}", f"Bearer own-{uuid.uuid4().hex}"
    secrets = (api_key, own_authorization)
    admin, pages, answers = AdminBrowser(), [], []

    # The admin configures the tool; the secret is typed once and never shown again.
    fields = admin_fields("refund_api", f"{http_peer.url}/orders/{{order_id}}/refunds", RiskTier.objects.get(level=1))
    fields |= {"http_headers-TOTAL_FORMS": 2, "http_headers-0-name": "X-Api-Key", "http_headers-0-secret": api_key}
    fields |= {"http_headers-1-name": "X-Tenant", "http_headers-1-value": "acme"}
    added = admin.submit("/admin/toolcatalog/tool/add/", fields, "tool_form")
    assert added.status_code == 302, [f.formset.errors for f in added.context["inline_admin_formsets"]]
    tool = Tool.objects.get(name="refund_api")
    change_page = admin.get(f"/admin/toolcatalog/tool/{tool.pk}/change/").content.decode()
    pages.append(change_page)
    assert "X-Api-Key" in change_page and f"{MASK} — leave blank to keep" in change_page
    # Saved again untouched, the secret is kept (blank means unchanged).
    assert admin.submit(f"/admin/toolcatalog/tool/{tool.pk}/change/", {}, "tool_form").status_code == 302
    assert HttpHeader.objects.get(tool=tool, name="X-Api-Key").secret == api_key
    with connection.cursor() as cursor:  # encrypted at rest
        cursor.execute("SELECT secret FROM toolcatalog_httpheader")
        stored = " ".join(row[0] for row in cursor.fetchall())
    assert api_key not in stored

    # A second tool whose own headers set Authorization: the credential moves to Gatehouse-Credential.
    echo = http_tool(
        "lookup_api", f"{http_peer.url}/echo/{{order_id}}?echo=1", secrets={"Authorization": own_authorization}
    )
    api = agent_api("payments-agent", {"refund_api": 3, "lookup_api": 3})

    call_id = propose(api, "refund_api", "refund-7", note="late")
    echo_id = propose(api, "lookup_api", "lookup-7")
    call, echoed = settled(call_id), settled(echo_id)

    assert call.status == "succeeded", (call.error, debug_worker.log())
    assert call.result == {
        "id": "rf-1",
        "path": "/orders/A%2F7%20b/refunds",
        "body": {"order": "A/7 b", "cents": 1500, "currency": "BRL"},
    }
    sent = next(r for r in http_peer.requests() if r["path"].startswith("/orders/"))
    assert sent["method"] == "POST" and sent["path"] == "/orders/A%2F7%20b/refunds"
    assert sent["headers"]["X-Api-Key"] == api_key and sent["headers"]["X-Tenant"] == "acme"
    assert sent["headers"]["Idempotency-Key"] == f"gatehouse-call-{call_id}"
    assert json.loads(sent["body"]) == {"order": "A/7 b", "cents": 1500, "currency": "BRL"}
    credential = sent["headers"]["Authorization"].removeprefix("Bearer ")
    claims = jwt.decode(
        credential, signing.keyring().active.private.public_key(), algorithms=["EdDSA"], audience=http_peer.url
    )
    assert (claims["operation"], claims["call"], claims["resource"]) == ("refund_api", call_id, "A/7 b")

    assert echoed.status == "succeeded", (echoed.error, debug_worker.log())
    looked_up = next(r for r in http_peer.requests() if r["path"].startswith("/echo/"))
    assert looked_up["headers"]["Authorization"] == own_authorization
    assert jwt.get_unverified_header(looked_up["headers"]["Gatehouse-Credential"])["alg"] == "EdDSA"
    assert echoed.result["headers"]["Authorization"] == MASK  # the peer echoed the secret: stored masked

    # Everything a person or another system reads afterwards.
    answers += [api.get(call_id).content.decode(), api.get(echo_id).content.decode(), api.tools().content.decode()]
    reviewer = User.objects.create_user("rita", password="x")
    reviewer.user_permissions.add(Permission.objects.get(codename="review_toolcall"))
    console = Client()
    console.force_login(reviewer)
    for path in ("/", f"/calls/{call_id}/", f"/calls/{echo_id}/", "/audit/"):
        pages.append(console.get(path).content.decode())
    for path in (
        f"/admin/toolcatalog/tool/{tool.pk}/change/",
        f"/admin/toolcatalog/tool/{echo.pk}/change/",
        f"/admin/toolcatalog/tool/{tool.pk}/history/",
        "/admin/audit/event/",
        f"/admin/approvals/toolcall/{echo_id}/change/",
    ):
        response = admin.get(path)
        assert response.status_code == 200, path
        pages.append(response.content.decode())
    events = [json.dumps(data, ensure_ascii=False) for data in Event.objects.values_list("data", flat=True)]
    places = {
        "answers": "\n".join(answers),
        "pages": "\n".join(pages),
        "audit events": "\n".join(events),
        "worker log": debug_worker.log_path.read_text(errors="replace"),
        "this process's log": "\n".join(record.getMessage() for record in caplog.records),
    }
    # Each place holds what it should (the calls, the worker's tasks), and none holds a secret.
    assert call_id in places["answers"] and call_id in places["pages"] and "admin.tool.added" in places["pages"]
    assert "approvals.tasks.execute_call" in places["worker log"] and "DEBUG" in places["worker log"]
    assert "X-Api-Key" in places["audit events"] and MASK in places["audit events"]  # named, masked
    assert {(place, s[:12]) for place, text in places.items() for s in secrets if s in text} == set()


@pytest.mark.django_db
def test_a_new_secret_is_audited_as_a_change_without_its_value_and_makes_a_new_version(
    catalog: dict[str, Tool],
) -> None:
    old, new = f"sk-old-{uuid.uuid4().hex}", f"sk-new-{uuid.uuid4().hex}"
    tool = http_tool("refund_api", "https://pay.example/orders/{order_id}", secrets={"X-Api-Key": old})
    version, admin = Tool.objects.get(pk=tool.pk).version, AdminBrowser()
    url = f"/admin/toolcatalog/tool/{tool.pk}/change/"

    assert admin.submit(url, {"http_headers-0-secret": new}, "tool_form").status_code == 302

    assert HttpHeader.objects.get(tool=tool).secret == new
    assert Tool.objects.get(pk=tool.pk).version > version  # approvals bound to the old request no longer hold
    event = Event.objects.get(action="admin.tool.changed")
    assert event.data["changed"] == ["http_headers", "version"]
    assert event.data["before"]["http_headers"][0]["secret"] != event.data["after"]["http_headers"][0]["secret"]
    assert old not in json.dumps(event.data) and new not in json.dumps(event.data)
    # A plain value typed over the secret replaces it.
    assert admin.submit(url, {"http_headers-0-value": "public"}, "tool_form").status_code == 302
    assert (HttpHeader.objects.get(tool=tool).secret, HttpHeader.objects.get(tool=tool).value) == ("", "public")


@pytest.mark.django_db
def test_a_reviewer_sees_the_request_approval_would_send_and_no_secret(agent_api: Callable[..., AgentApi]) -> None:
    secret = f"sk-preview-{uuid.uuid4().hex}"
    http_tool("refund_api", "https://pay.example/orders/{order_id}/refunds", tier=2, secrets={"X-Api-Key": secret})
    api = agent_api("payments-agent", {"refund_api": 3})
    call_id = propose(api, "refund_api", "refund-held")
    reviewer = User.objects.create_user("rita", password="x")
    reviewer.user_permissions.add(Permission.objects.get(codename="review_toolcall"))
    console = Client()
    console.force_login(reviewer)

    panel = console.get(f"/calls/{call_id}/preview/").content.decode()

    assert ToolCall.objects.get(pk=call_id).status == "pending_approval"
    assert "This HTTP API offers no dry run: approving sends the request below." in panel
    assert "https://pay.example/orders/A%2F7%20b/refunds" in panel and "X-Api-Key" in panel
    assert secret not in panel and secret not in json.dumps(ToolCall.objects.get(pk=call_id).preview)


# ------------------------------------------------------------------ how attempts end


def test_a_4xx_fails_the_call_at_once(
    debug_worker: CeleryWorker, http_peer: HttpPeer, agent_api: Callable[..., AgentApi]
) -> None:
    http_tool("refund_api", f"{http_peer.url}/orders/{{order_id}}/refunds?status=422")
    api = agent_api("payments-agent", {"refund_api": 3})

    call = settled(propose(api, "refund_api", "refund-422"))

    assert call.status == "failed" and call.attempts == 1, debug_worker.log()
    assert call.error["message"] == "refused by the peer" and call.error["retryable"] is False
    assert len(http_peer.requests()) == 1


def test_a_configured_permanent_status_fails_at_once_even_a_5xx(
    debug_worker: CeleryWorker, http_peer: HttpPeer, agent_api: Callable[..., AgentApi]
) -> None:
    http_tool("refund_api", f"{http_peer.url}/orders/{{order_id}}?status=501", permanent_statuses="400-499, 501")
    api = agent_api("payments-agent", {"refund_api": 3})

    call = settled(propose(api, "refund_api", "refund-501"))

    assert (call.status, call.attempts, len(http_peer.requests())) == ("failed", 1, 1)


def test_a_5xx_is_retried_with_backoff_and_the_same_key_then_succeeds(
    debug_worker: CeleryWorker, http_peer: HttpPeer, agent_api: Callable[..., AgentApi]
) -> None:
    http_tool("refund_api", f"{http_peer.url}/orders/{{order_id}}/refunds?fail_times=2", result_pointer="/data/refund")
    api = agent_api("payments-agent", {"refund_api": 3})

    call_id = propose(api, "refund_api", "refund-503")
    call = settled(call_id)

    assert call.status == "succeeded" and call.attempts == 3, (call.error, debug_worker.log())
    assert call.result["id"] == "rf-3"
    keys = [request["headers"]["Idempotency-Key"] for request in http_peer.requests()]
    assert keys == [f"gatehouse-call-{call_id}"] * 3
    seal_all()  # in chain order: sealed, as the sequencer does within a second
    actions = list(Event.objects.filter(call_id=call_id).order_by("seq").values_list("action", flat=True))
    assert actions.count("call.retry_scheduled") == 2


def test_a_timeout_after_sending_needs_reconciliation_and_is_never_sent_again(
    debug_worker: CeleryWorker, http_peer: HttpPeer, agent_api: Callable[..., AgentApi]
) -> None:
    http_tool("refund_api", f"{http_peer.url}/orders/{{order_id}}/refunds?sleep=3", timeout_seconds=1)
    api = agent_api("payments-agent", {"refund_api": 3})

    call = settled(propose(api, "refund_api", "refund-slow"))

    assert call.status == "needs_reconciliation", (call.error, debug_worker.log())
    assert "was sent and no answer in time" in call.error["detail"]
    wait_until(lambda: len(http_peer.requests()) >= 1)
    time_to_resend = 4  # well past a retry's backoff and the sweeper's period (1 s) and lease (5 s)
    with pytest.raises(AssertionError):
        wait_until(lambda: len(http_peer.requests()) > 1, timeout=time_to_resend)
    assert ToolCall.objects.get(pk=call.pk).attempts == 1


def test_a_timeout_on_an_idempotent_tool_is_retried(
    debug_worker: CeleryWorker, http_peer: HttpPeer, agent_api: Callable[..., AgentApi]
) -> None:
    template = f"{http_peer.url}/orders/{{order_id}}/refunds?sleep=3&sleep_times=1"
    http_tool("refund_api", template, timeout_seconds=1, idempotent=True)
    api = agent_api("payments-agent", {"refund_api": 3})

    call = settled(propose(api, "refund_api", "refund-idem"))

    assert call.status == "succeeded" and call.attempts == 2, (call.error, debug_worker.log())


def test_a_request_that_could_not_be_sent_is_retried_then_fails(
    debug_worker: CeleryWorker, agent_api: Callable[..., AgentApi]
) -> None:
    http_tool("refund_api", f"http://127.0.0.1:{free_port()}/orders/{{order_id}}")  # nothing listens there
    api = agent_api("payments-agent", {"refund_api": 3})

    call = settled(propose(api, "refund_api", "refund-down"))

    assert (call.status, call.attempts) == ("failed", 3), debug_worker.log()
    assert "was not sent" in call.error["message"] and call.error["retryable"] is True
