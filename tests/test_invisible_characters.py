"""Hidden characters are spelled out wherever a reviewer reads a value, and the call page warns of them.

A right-to-left override makes `acct-\u202e87654321` display as `acct-12345678`; a
zero-width space makes `ACME\u200b-1` look exactly like `ACME-1`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.template import Context, Template

from approvals.models import ToolCall
from approvals.templatetags.console import reveal, reveal_plain
from approvals.views.present import hidden_characters, is_hidden
from tests.browser import Console, page_text
from tests.conftest import AgentApi
from tests.test_console_context import read

RLO = "\u202e"
ZWSP = "\u200b"


@pytest.mark.parametrize(
    "char",
    ["\u202e", "\u202d", "\u2066", "\u2069", "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u00a0",
     "\u2007", "\u3000", "\u3164", "\ufe0f", "\U000e0041", "\x1b", "\u2028", "\u2029", "\ue000"],
)  # fmt: skip
def test_format_control_and_lookalike_characters_count_as_hidden(char: str) -> None:
    assert is_hidden(char)


@pytest.mark.parametrize("char", ["a", "7", " ", "-", "é", "ç", "€", "\n", "\t", "ß", "中"])
def test_ordinary_letters_spaces_and_line_breaks_are_not_hidden(char: str) -> None:
    assert not is_hidden(char)


def test_a_right_to_left_override_is_shown_as_a_marked_code_point() -> None:
    html = reveal(f"acct-{RLO}87654321")
    assert RLO not in html
    assert html == 'acct-<mark class="hidden-char" title="RIGHT-TO-LEFT OVERRIDE">⟨U+202E⟩</mark>87654321'


def test_a_zero_width_space_makes_two_lookalike_values_differ_visibly() -> None:
    assert reveal("pay ACME-1") == "pay ACME-1"
    assert reveal(f"pay ACME{ZWSP}-1") == 'pay ACME<mark class="hidden-char" title="ZERO WIDTH SPACE">⟨U+200B⟩</mark>-1'


def test_revealed_text_is_still_escaped() -> None:
    html = reveal(f'<script>alert("x")</script>{RLO}<img src=x onerror=alert(1)>')
    assert "<script>" not in html and "<img" not in html
    assert "&lt;script&gt;" in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "⟨U+202E⟩" in html


def test_the_plain_form_for_attributes_spells_out_characters_without_markup() -> None:
    assert reveal_plain(f"acct-{RLO}87654321") == "acct-⟨U+202E⟩87654321"


def test_the_filter_in_a_template_escapes_and_keeps_line_breaks_for_linebreaksbr() -> None:
    template = Template("{% load console %}{{ text|reveal|linebreaksbr }}")
    html = template.render(Context({"text": f"first & <b>line</b>\nsecond{ZWSP}"}))
    mark = '<mark class="hidden-char" title="ZERO WIDTH SPACE">⟨U+200B⟩</mark>'
    assert html == f"first &amp; &lt;b&gt;line&lt;/b&gt;<br>second{mark}"


def test_hidden_characters_are_found_in_nested_keys_and_values() -> None:
    arguments = {"account": f"acct-{RLO}87654321", "lines": [{"payee": f"ACME{ZWSP}-1"}], f"no{ZWSP}te": "ok", "n": 1}
    assert hidden_characters(arguments) == [
        ("account", ["U+202E"]),
        ("lines[0].payee", ["U+200B"]),
        (f"no{ZWSP}te", ["U+200B"]),
    ]
    assert hidden_characters({"account": "acct-12345678", "n": 2}) == []


@pytest.fixture
def box_office(agent_api: Callable[..., AgentApi], people: Any) -> AgentApi:
    return agent_api("box-office-agent", {"hold_seats": 1}, owner="admin")


def hold(api: AgentApi, event_id: str, seat: str, key: str, **extra: Any) -> ToolCall:
    body = {
        "tool": "hold_seats",
        "arguments": {"event_id": event_id, "seat_ids": [seat]},
        "idempotency_key": key,
        "conversation_id": "conv-hidden",
        **extra,
    }
    response = api.propose(body)
    assert response.status_code in (201, 202), response.content
    return ToolCall.objects.get(pk=response.json()["id"])


def test_the_call_page_spells_out_hidden_characters_everywhere_and_warns(
    box_office: AgentApi, console: Callable[[str], Console]
) -> None:
    hold(box_office, "acct-87654321", "ACME-1", "hidden-1")
    call = hold(
        box_office, f"acct-{RLO}87654321", f"ACME{ZWSP}-1", "hidden-2", justification=f"Seat for acct-{RLO}87654321"
    )
    response = console("alice").get(f"/calls/{call.pk}/")
    html = response.content.decode()
    text = read(response)
    assert RLO not in html and ZWSP not in html
    assert "Hidden characters in the arguments" in text
    warning = text[text.index("Hidden characters in the arguments") :]
    assert "event_id: U+202E" in warning and "seat_ids[0]: U+200B" in warning
    # In the arguments, in the justification and in the diff against the previous proposal.
    assert text.count("acct-⟨U+202E⟩87654321") >= 3
    assert "ACME⟨U+200B⟩-1" in text
    previous = text[text.index("Compared with the agent's previous proposal") :]
    assert "ACME-1" in previous and "ACME⟨U+200B⟩-1" in previous


def test_a_call_without_hidden_characters_has_no_warning(
    box_office: AgentApi, console: Callable[[str], Console]
) -> None:
    call = hold(box_office, "acct-87654321", "ACME-1", "plain-1")
    assert "Hidden characters" not in page_text(console("alice").get(f"/calls/{call.pk}/"))


def test_the_queue_spells_out_a_hidden_character_in_the_resource(
    agent_api: Callable[..., AgentApi], console: Callable[[str], Console]
) -> None:
    support = agent_api("support-agent", {"emitir_estorno": 3}, owner="admin")
    response = support.propose(
        {
            "tool": "emitir_estorno",
            "arguments": {"pedido_id": "PED-00000001", "valor_centavos": 30000, "motivo": "produto_defeituoso"},
            "idempotency_key": "queue-hidden",
            "justification": f"Refund to acct-{RLO}87654321",
        }
    )
    assert response.status_code == 202, response.content
    page = console("alice").get("/")
    assert RLO not in page.content.decode()
    assert "acct-⟨U+202E⟩87654321" in read(page)
