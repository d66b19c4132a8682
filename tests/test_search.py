"""Free-text search in the queue and the audit log: resource ids in arguments, agents, tools, call ids.

ORM only: run this module on SQLite as well as PostgreSQL (DATABASE_URL=sqlite:///…).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest
from playwright.sync_api import expect

from approvals.models import ToolCall
from tests.browser import Console, page_text
from tests.browser import propose_refund as propose
from tests.conftest import AgentApi

pytestmark = pytest.mark.django_db


@pytest.fixture
def calls(support: AgentApi, agent_api: Callable[..., AgentApi]) -> dict[str, ToolCall]:
    """Three pending refunds: two orders for support-agent, one for billing-bot."""
    billing = agent_api("billing-bot", {"emitir_estorno": 3}, owner="admin")
    return {
        "first": propose(support, 30000, "k-s1", pedido="PED-00000001"),
        "second": propose(support, 40000, "k-s2", pedido="PED-00000002"),
        "billing": propose(billing, 50000, "k-s3", pedido="PED-00000003"),
    }


def listed(html: str, calls: dict[str, ToolCall]) -> set[str]:
    return {name for name, call in calls.items() if f'data-call="{call.pk}"' in html}


def queue_search(alice: Console, text: str, htmx: bool = False) -> str:
    response = alice.get(f"/?q={quote(text)}", htmx=htmx)
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("PED-00000002", {"second"}),
        ("ped-00000002", {"second"}),  # any case
        ("00000003", {"billing"}),
        ("billing", {"billing"}),
        ("support-agent", {"first", "second"}),
        ("emitir_estorno", {"first", "second", "billing"}),
        ("PED-9", set()),
        ("%", set()),  # a LIKE wildcard is just a character here
        ("_", {"first", "second", "billing"}),  # …as the underscores in the tool's name
    ],
)
def test_the_queue_search_finds_calls_by_resource_id_agent_and_tool(
    text: str, expected: set[str], calls: dict[str, ToolCall], console: Callable[[str], Console]
) -> None:
    assert listed(queue_search(console("alice"), text), calls) == expected


def test_the_queue_search_finds_a_call_by_its_id_or_the_start_of_it(
    calls: dict[str, ToolCall], console: Callable[[str], Console]
) -> None:
    alice = console("alice")
    call_id = str(calls["second"].pk)
    assert listed(queue_search(alice, call_id), calls) == {"second"}
    assert listed(queue_search(alice, call_id.upper()), calls) == {"second"}
    assert listed(queue_search(alice, call_id[:8]), calls) == {"second"}
    assert listed(queue_search(alice, call_id.replace("-", "")[:13]), calls) == {"second"}


def test_the_search_is_a_field_of_the_filter_form_kept_by_polls_and_combined_with_filters(
    calls: dict[str, ToolCall], console: Callable[[str], Console]
) -> None:
    alice = console("alice")
    html = alice.get("/?q=PED-0000000&agent=billing-bot").content.decode()
    assert listed(html, calls) == {"billing"}
    assert 'name="q"' in html and 'value="PED-0000000"' in html
    assert 'hx-get="/?agent=billing-bot&amp;q=PED-0000000"' in html
    assert "matching these filters" in page_text(alice.get("/?q=PED-0000000"))
    partial = queue_search(alice, "PED-00000001", htmx=True)
    assert listed(partial, calls) == {"first"} and "<html" not in partial


def test_the_audit_log_search_finds_every_event_of_the_calls_about_a_resource(
    calls: dict[str, ToolCall], console: Callable[[str], Console]
) -> None:
    alice = console("alice")
    assert alice.approve(calls["second"]).status_code in (200, 302)
    html = alice.get("/audit/?q=PED-00000002").content.decode()
    call_id = str(calls["second"].pk)
    assert "call.proposed" in html and "call.approved" in html
    assert html.count(f'title="{call_id}"') >= 2
    for other in ("first", "billing"):
        assert str(calls[other].pk) not in html


@pytest.mark.parametrize(
    ("text", "expected"),
    [("billing-bot", {"billing"}), ("BILLING", {"billing"}), ("nothing-like-this", set())],
)
def test_the_audit_log_search_finds_events_by_agent(
    text: str, expected: set[str], calls: dict[str, ToolCall], console: Callable[[str], Console]
) -> None:
    html = console("alice").get(f"/audit/?q={quote(text)}").content.decode()
    assert {name for name, call in calls.items() if str(call.pk) in html} == expected


def test_the_audit_log_search_finds_a_call_by_the_start_of_its_id(
    calls: dict[str, ToolCall], console: Callable[[str], Console]
) -> None:
    call_id = str(calls["first"].pk)
    html = console("alice").get(f"/audit/?q={call_id[:8]}").content.decode()
    assert {name for name, call in calls.items() if str(call.pk) in html} == {"first"}


def test_the_audit_log_search_matches_text_beyond_ascii_and_json_escapes(
    agent_api: Callable[..., AgentApi], console: Callable[[str], Console]
) -> None:
    booker = agent_api("booker", {"hold_seats": 1}, owner="admin")
    body = {
        "tool": "hold_seats",
        "idempotency_key": "k-unicode",
        "arguments": {"event_id": 'São "Paulo" ção', "seat_ids": ["A1"], "idempotency_key": "k-unicode"},
    }
    assert booker.propose(body).status_code in (201, 202)
    alice = console("alice")
    for text in ("São", 'São "Paulo"', "ção"):
        assert "call.proposed" in alice.get(f"/audit/?q={quote(text)}").content.decode(), text
    assert "call.proposed" not in alice.get(f"/audit/?q={quote('Sao')}").content.decode()


def test_the_export_holds_only_what_the_search_found(
    calls: dict[str, ToolCall], console: Callable[[str], Console]
) -> None:
    response = console("alice").get("/audit/export.jsonl?q=PED-00000003")
    lines = b"".join(response.streaming_content).decode().splitlines()
    assert lines and all(str(calls["billing"].pk) in line for line in lines)


@pytest.mark.browser
def test_typing_in_the_queue_search_narrows_the_list_and_the_address_keeps_it(
    calls: dict[str, ToolCall], log_in: Callable[[str], Any]
) -> None:
    page = log_in("alice")
    rows = page.locator("#queue-results tr[data-call]")
    expect(rows).to_have_count(3)
    page.keyboard.press("/")
    expect(page.get_by_label("Search")).to_be_focused()
    page.keyboard.type("PED-00000002")
    expect(rows).to_have_count(1)
    expect(page.locator(f'tr[data-call="{calls["second"].pk}"]')).to_be_visible()
    assert "q=PED-00000002" in page.url
    expect(page.locator("#queue-results")).to_contain_text("matching these filters")
