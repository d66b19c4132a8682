"""Console query strings: every parameter goes through a form, so no query string makes a page fail.

Invalid values answer 400 with the page and the filter bar saying what is wrong (the
value is not applied); parameters no page knows are ignored. A Hypothesis test throws
generated query strings at every console page.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlencode

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from tests.browser import Console, page_text
from tests.browser import propose_refund as propose
from tests.conftest import AgentApi

pytestmark = pytest.mark.django_db

KNOWN_NAMES = (
    *("tool", "agent", "tier", "q", "page"),
    *("action", "call", "date_from", "date_to", "before"),
    *("seen", "version", "fresh", "o"),
)
EDGE_VALUES = (
    "",
    "0",
    "-1",
    "99999999999999999999999",
    "9223372036854775808",
    "1e309",
    "NaN",
    "9999-12-31",
    "0001-01-01",
    "2026-02-30",
    "00000000-0000-0000-0000-000000000000",
    "emitir_estorno",
    "support-agent",
    "PED-00000001",
    "%",
    "_",
    "\\",
    '"',
    "\x00",
    "\u202e",
)
values = st.one_of(
    st.sampled_from(EDGE_VALUES),
    st.text(max_size=30),
    st.integers().map(str),
    st.dates().map(lambda day: day.isoformat()),
)
known = st.dictionaries(st.sampled_from(KNOWN_NAMES), values, max_size=4).map(urlencode)
any_names = st.lists(st.tuples(st.text(min_size=1, max_size=8), values), max_size=4).map(urlencode)
# Raw query strings too: stray percent signs, invalid UTF-8 escapes, separators in odd places.
raw = st.text(alphabet="%&=;+?#abcdefqtp0189FGxX-_.~ \u00e9", max_size=40)
query_strings = st.one_of(known, any_names, raw)

FUZZ = hypothesis_settings(
    max_examples=100,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
PAGES = ("/", "/activity/", "/overview/", "/audit/", "/calls/{call}/", "/calls/{call}/live/")


@pytest.fixture
def call_id(support: AgentApi) -> str:
    """A pending call, so that a call's page has something to show."""
    return str(propose(support, 30000, "k-fuzz", justification="the customer asked").pk)


@pytest.mark.parametrize("page", PAGES)
def test_every_known_parameter_with_every_edge_value_leaves_a_page_working(
    page: str, call_id: str, console: Callable[[str], Console]
) -> None:
    alice, path = console("alice"), page.format(call=call_id)
    for name in KNOWN_NAMES:
        for value in EDGE_VALUES:
            response = alice.get(f"{path}?{urlencode({name: value})}")
            assert response.status_code < 500, (path, name, value)


@pytest.mark.parametrize("page", PAGES)
@FUZZ
@given(query=query_strings, htmx=st.booleans())
def test_no_query_string_makes_a_console_page_fail(
    page: str, query: str, htmx: bool, call_id: str, console: Callable[[str], Console]
) -> None:
    path = page.format(call=call_id)
    response = console("alice").get(f"{path}?{query}", htmx=htmx)
    assert response.status_code < 500, (path, query)


# The query strings that failed, and what a person sees instead.


def test_a_page_number_beyond_any_integer_is_a_400_that_says_why(console: Callable[[str], Console]) -> None:
    response = console("alice").get("/?page=99999999999999999999999")
    assert response.status_code == 400
    assert "Page" in page_text(response) and "less than or equal to" in page_text(response)


def test_the_last_day_of_the_calendar_is_a_valid_end_date(support: AgentApi, console: Callable[[str], Console]) -> None:
    propose(support, 30000, "k-last-day")
    response = console("alice").get("/audit/?date_to=9999-12-31")
    assert response.status_code == 200
    assert "call.proposed" in page_text(response)


@pytest.mark.parametrize(
    "query",
    ["before=99999999999999999999", "before=-5", "date_from=2026-02-30", "call=not-a-uuid", "date_from=99999-01-01"],
)
def test_an_invalid_audit_filter_is_a_400_with_the_filter_bar_saying_why(
    query: str, console: Callable[[str], Console]
) -> None:
    response = console("alice").get(f"/audit/?{query}")
    assert response.status_code == 400
    assert 'class="errorlist' in response.content.decode()


@pytest.mark.parametrize("query", ["tool=no-such-tool", "tier=9", "agent=%00", "page=0"])
def test_an_invalid_queue_filter_is_a_400_that_narrows_nothing(
    query: str, support: AgentApi, console: Callable[[str], Console]
) -> None:
    call = propose(support, 30000, "k-invalid-filter")
    response = console("alice").get(f"/?{query}")
    assert response.status_code == 400
    assert 'class="errorlist' in response.content.decode()
    assert f'data-call="{call.pk}"' in response.content.decode()


def test_an_unknown_parameter_is_ignored_and_not_called_a_filter(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    propose(support, 30000, "k-unknown-param")
    response = console("alice").get("/?o=-1&utm_source=mail")
    assert response.status_code == 200
    text = page_text(response)
    assert "matching these filters" not in text
    assert "o=-1" not in text and "utm_source" not in text  # the next poll does not carry them either


def test_a_valid_filter_is_kept_for_the_next_poll_and_an_invalid_one_is_not(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    propose(support, 30000, "k-poll")
    html = console("alice").get("/?agent=support-agent&tier=9&page=1").content.decode()
    assert 'hx-get="/?agent=support-agent"' in html
    assert "matching these filters" in page_text(console("alice").get("/?agent=support-agent"))


def test_every_page_links_the_favicon_and_it_is_served(console: Callable[[str], Console]) -> None:
    alice = console("alice")
    html = alice.get("/").content.decode()
    assert 'rel="icon"' in html
    href = html.split('rel="icon"')[1].split('href="')[1].split('"')[0]
    assert alice.get(href).status_code == 200
