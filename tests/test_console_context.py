"""What the console tells a reviewer around a call: words that match its state, the resource's and the
conversation's history, readable edit errors, the queue's hints, the title's count and the overview's figures."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from approvals.forms import describe_pattern
from approvals.models import Status, ToolCall
from approvals.views.present import foretells_refusal
from tests.browser import Console, page_text, propose_refund
from tests.conftest import AgentApi


def read(response: Any) -> str:
    """Return a page's text as a person reads it: no tags, entities decoded, whitespace collapsed."""
    inline = re.sub(r"</?(?:mark|span|code|strong|a|time|kbd|em|b)\b[^>]*>", "", page_text(response))
    return " ".join(re.sub(r"<[^>]+>", " ", inline).split())


def section(text: str, heading: str, until: str | None = None) -> str:
    """Return the page text from `heading` to `until` (or the end)."""
    start = text.index(heading)
    return text[start : text.index(until, start) if until else None]


def finish(call: ToolCall, status: str, **fields: Any) -> None:
    """Put a call in a finished state, as the worker would have left it (the page is what is tested here)."""
    ToolCall.objects.filter(pk=call.pk).update(status=status, finished_at=timezone.now(), **fields)


def test_a_pending_refund_above_r200_reads_as_its_own_tier_and_rule_not_the_tools_base_tier(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    call = propose_refund(support, 30000, "words-tier")
    text = read(console("alice").get(f"/calls/{call.pk}/"))
    risk = section(text, "Why this call is tier", "Audit timeline")
    assert "Why this call is tier 2 irreversible write" in risk
    assert "above-autonomy" in risk
    assert "(reversible write)" not in risk
    assert "exactly what will run" in text and "Dry-run preview" in text


def test_a_succeeded_call_says_what_ran_and_what_happened(support: AgentApi, console: Callable[[str], Console]) -> None:
    call = propose_refund(support, 30000, "words-done")
    finish(call, Status.SUCCEEDED, result={"refund_id": "RE-000042", "status": "refunded"})
    text = read(console("alice").get(f"/calls/{call.pk}/"))
    assert "Arguments what ran" in text
    assert "What happened: the result" in text and "RE-000042" in text
    assert "The call ran and succeeded. Nothing is left to decide." in text
    for stale in ("exactly what will run", "Dry-run preview", "This call is succeeded"):
        assert stale not in text


def test_a_rejected_call_says_it_never_ran(support: AgentApi, console: Callable[[str], Console]) -> None:
    call = propose_refund(support, 30000, "words-rejected")
    assert console("bob").post(f"/calls/{call.pk}/reject/", {"reason": "Not this order."}).status_code == 302
    text = read(console("alice").get(f"/calls/{call.pk}/"))
    assert "what the agent asked for; it never ran" in text
    assert "A reviewer rejected the call; it never ran." in text
    assert "exactly what will run" not in text and "This call is rejected" not in text


def test_the_call_page_shows_the_orders_other_calls_with_amounts_outcomes_and_deciders(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    rejected = propose_refund(support, 25000, "history-1", pedido="PED-00000003")
    console("bob").post(f"/calls/{rejected.pk}/reject/", {"reason": "Duplicate."})
    approved = propose_refund(support, 21000, "history-2", pedido="PED-00000003")
    assert console("alice").approve(approved).status_code == 302
    propose_refund(support, 90000, "history-other-order", pedido="PED-00000004")
    call = propose_refund(support, 30000, "history-3", pedido="PED-00000003")
    text = read(console("carol").get(f"/calls/{call.pk}/"))
    history = section(text, "Other calls on pedido_id PED-00000003", "Audit timeline")
    assert "R$ 250,00" in history and "rejected by bob" in history
    assert "R$ 210,00" in history and "approved by alice" in history
    assert "R$ 900,00" not in history and "R$ 300,00" not in history


def test_the_call_page_lists_the_conversations_other_calls_in_order(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    first = propose_refund(support, 21000, "conv-1", pedido="PED-00000005", conversation_id="chat-9", step=1)
    propose_refund(support, 22000, "conv-2", pedido="PED-00000006", conversation_id="chat-9", step=2)
    propose_refund(support, 23000, "conv-elsewhere", pedido="PED-00000007", conversation_id="chat-10")
    call = propose_refund(support, 24000, "conv-3", pedido="PED-00000008", conversation_id="chat-9", step=3)
    text = read(console("alice").get(f"/calls/{call.pk}/"))
    others = section(text, "The conversation's other calls", "Audit timeline")
    assert others.index("R$ 210,00") < others.index("R$ 220,00")
    assert "R$ 230,00" not in others and "R$ 240,00" not in others
    assert str(first.pk) in console("alice").get(f"/calls/{call.pk}/").content.decode()


def test_edit_errors_speak_in_reais_and_words_not_cents_and_regexes(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    call = propose_refund(support, 30000, "edit-words")
    response = console("alice").post(
        f"/calls/{call.pk}/edit/",
        {
            "base_hash": call.arguments_hash,
            "pedido_id": "PED-1",
            "valor_centavos": "6000000",
            "motivo": '"produto_defeituoso"',
        },
    )
    text = read(response)
    errors = " ".join(re.findall(r'<p class="field-error-text">(.*?)</p>', response.content.decode()))
    assert "Must be at most R$ 50.000,00." in text
    assert "Must be PED- followed by 8 digits." in text
    assert "5000000" not in errors and "^PED-" not in errors and "[0-9]" not in errors


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        ("^PED-[0-9]{8}$", "PED- followed by 8 digits"),
        ("^[a-f0-9]{32}$", "32 lowercase hex characters"),
        ("^RE-\\d+$", "RE- followed by one or more digits"),
        ("^[A-Z]{2,3}[0-9]{4,}$", "2 to 3 capital letters followed by 4 or more digits"),
        ("^a(b|c)$", None),
        ("PED-[0-9]{8}", None),
    ],
)
def test_simple_id_patterns_are_described_in_words_and_others_are_not_guessed(pattern: str, words: str | None) -> None:
    assert describe_pattern(pattern) == words


def test_the_edit_form_bounds_the_money_hint_and_keeps_the_idempotency_key_read_only(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    call = propose_refund(support, 30000, "edit-key")
    html = console("alice").get(f"/calls/{call.pk}/edit/").content.decode()
    money = re.search(r'<input[^>]*name="valor_centavos"[^>]*>', html).group(0)
    assert 'data-money="cents"' in money and 'data-minimum="1"' in money and 'data-maximum="5000000"' in money
    key = re.search(r'<input[^>]*name="idempotency_key"[^>]*>', html).group(0)
    assert "disabled" in key and call.arguments["idempotency_key"] in key
    response = console("alice").post(
        f"/calls/{call.pk}/edit/",
        {
            "base_hash": call.arguments_hash,
            "pedido_id": "PED-00000001",
            "valor_centavos": "15000",
            "motivo": '"produto_defeituoso"',
            "idempotency_key": "f" * 32,
            "confirm": "1",
        },
    )
    assert response.status_code == 302
    call.refresh_from_db()
    assert call.arguments["valor_centavos"] == 15000
    assert call.arguments["idempotency_key"] != "f" * 32


def test_the_queue_shows_the_justification_and_marks_a_call_the_dry_run_says_would_be_refused(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    doomed = propose_refund(support, 30000, "queue-doomed", justification="Customer says the box arrived empty.")
    ToolCall.objects.filter(pk=doomed.pk).update(
        preview={"would_fail": "refund_exceeds_order", "summary": "Would be refused."}
    )
    fine = propose_refund(support, 31000, "queue-fine")
    html = console("alice").get("/").content.decode()
    doomed_row = re.search(rf'<tr data-call="{doomed.pk}".*?</tr>', html, re.S).group(0)
    fine_row = re.search(rf'<tr data-call="{fine.pk}".*?</tr>', html, re.S).group(0)
    assert "Customer says the box arrived empty." in doomed_row
    assert "would be refused" in doomed_row
    assert "would be refused" not in fine_row


@pytest.mark.parametrize(
    ("would_fail", "refused"),
    [(None, False), ("", False), ("false", False), (0, False), ("refund_exceeds_order", True), ("true", True)],
)
def test_only_a_dry_run_that_names_a_failure_marks_a_queue_row(would_fail: Any, refused: bool) -> None:
    assert foretells_refusal(would_fail) is refused


def test_the_page_title_carries_the_pending_count(support: AgentApi, console: Callable[[str], Console]) -> None:
    html = console("alice").get("/").content.decode()
    assert "<title>Queue · Gatehouse</title>" in html
    propose_refund(support, 30000, "title-1")
    propose_refund(support, 31000, "title-2")
    for path in ("/", "/overview/"):
        assert re.search(r"<title>\(2\) \w+ · Gatehouse</title>", console("alice").get(path).content.decode())


def test_the_overview_shows_the_share_approved_and_time_to_decision_by_tier_and_by_day(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    approved = propose_refund(support, 30000, "overview-1")
    console("alice").approve(approved)
    rejected = propose_refund(support, 31000, "overview-2")
    console("bob").post(f"/calls/{rejected.pk}/reject/", {"reason": "No."})
    # One decision took an hour: the tier's median is what the page must show.
    proposed_at = timezone.now() - timedelta(hours=1)
    ToolCall.objects.filter(pk__in=[approved.pk, rejected.pk]).update(created_at=proposed_at)
    text = read(console("alice").get("/overview/"))
    assert "emitir_estorno 1 1 0 50%" in section(text, "Share approved", "Calls by state")
    wait = section(text, "Time to decision", "Open circuit breakers")
    assert re.search(r"T2 2 (59m|1h 00m)", wait)
    # A day's figures belong to the day the calls were proposed, which is yesterday just after midnight.
    assert re.search(rf"{timezone.localdate(proposed_at):%Y-%m-%d}: (59m|1h 00m)", wait)
