"""One canonical JSON form (RFC 8785) for every hash: arguments normalised once, at intake.

The property test proposes generated JSON texts (exponents, huge and tiny numbers,
unicode, nesting) through the API and checks that the hash taken at proposal is
the hash of the row PostgreSQL gives back, and of the same JSON read back through
Django's JSONField on SQLite; and that the audit chain verifies after all of them.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Iterator
from typing import Any

import hypothesis
import pytest
from django.core.management import call_command
from django.db import connection, models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.utils import ConnectionHandler
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from approvals.models import ToolCall
from audit.canonical import canonical_hash as arguments_hash
from audit.canonical import canonical_json, inexact_numbers, normalized
from audit.chain import first_break, record_alone
from audit.models import ActorKind, Event
from audit.sequencer import seal_all
from tests.conftest import AgentApi, refund
from tests.processes import CeleryWorker

ACTOR = (ActorKind.SYSTEM, "test")

# A JSON number as an agent may spell it: signs, fractions, exponents in either case.
NUMBER_TEXT = st.from_regex(r"\A-?(0|[1-9][0-9]{0,24})(\.[0-9]{1,20})?([eE][+-]?[0-9]{1,3})?\Z").filter(
    lambda text: math.isfinite(float(text))
)
NUMBER = st.one_of(
    NUMBER_TEXT,
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(["1e16", "1E+16", "1e21", "100.0", "-0.0", "5e-324", "1.7976931348623157e308", "1e-7"]),
)
# Any text JSON carries and a database stores (no NUL, no lone surrogate), bidi and zero-width included.
TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=12)
STRING = st.tuples(TEXT, st.booleans()).map(lambda pair: json.dumps(pair[0], ensure_ascii=pair[1]))


def _object(members: dict[str, str]) -> str:
    return "{" + ",".join(f"{json.dumps(key, ensure_ascii=False)}:{value}" for key, value in members.items()) + "}"


JSON_TEXT = st.recursive(
    st.one_of(NUMBER, STRING, st.sampled_from(["true", "false", "null"])),
    lambda children: st.one_of(
        st.lists(children, max_size=4).map(lambda items: "[" + ",".join(items) + "]"),
        st.dictionaries(TEXT, children, max_size=4).map(_object),
    ),
    max_leaves=12,
)
ARGUMENTS_TEXT = st.dictionaries(TEXT, JSON_TEXT, max_size=6).map(_object)
FIVE_HUNDRED_EXAMPLES = hypothesis.settings(
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)

# A tool taking any object, held for a reviewer: nothing is enqueued, every call stays as proposed.
ANY_OBJECT_TOOL = {
    "name": "record_anything",
    "title": "Record anything",
    "description": "Takes any JSON object.",
    "input_schema": {"type": "object"},
    "base_tier": 2,
}


@pytest.fixture
def sqlite() -> Iterator[BaseDatabaseWrapper]:
    """A connection of its own to an in-memory SQLite database, holding one JSON column as Django makes it."""
    wrapper = ConnectionHandler({"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}})["default"]
    with wrapper.cursor() as cursor:
        cursor.execute(f"CREATE TABLE held (value {models.JSONField().db_type(wrapper)})")
    yield wrapper
    wrapper.close()


def through_sqlite(wrapper: BaseDatabaseWrapper, value: Any) -> Any:
    """Return `value` stored in and read back from SQLite the way Django's JSONField does both."""
    field = models.JSONField()
    with wrapper.cursor() as cursor:
        cursor.execute("DELETE FROM held")
        cursor.execute("INSERT INTO held (value) VALUES (%s)", [field.get_db_prep_save(value, wrapper)])
        cursor.execute("SELECT value FROM held")
        return field.from_db_value(cursor.fetchone()[0], None, wrapper)


def propose_text(api: AgentApi, key: str, arguments_text: str, tool: str = "record_anything") -> Any:
    raw = f'{{"tool": "{tool}", "idempotency_key": "{key}", "arguments": {arguments_text}}}'
    return api.propose(None, raw=raw)


@pytest.mark.django_db(transaction=True)
def test_the_hash_taken_at_proposal_is_the_hash_of_the_row_read_back_from_postgresql_and_sqlite(
    catalog: dict[str, Any], agent_api: Any, sqlite: BaseDatabaseWrapper, settings: Any
) -> None:
    from demo.management.commands.seed_demo import seed_tiers, seed_tool

    seed_tool(ANY_OBJECT_TOOL, seed_tiers())
    settings.GATEHOUSE_AGENT_BUDGET_CALLS = 0  # a thousand proposals from one agent: no budget in the way
    api = agent_api("prober", {"record_anything": 3})
    keys = (f"k-{n}" for n in itertools.count())

    @FIVE_HUNDRED_EXAMPLES
    @given(arguments_text=ARGUMENTS_TEXT)
    def hashes_agree(arguments_text: str) -> None:
        parsed = json.loads(arguments_text)
        key = next(keys)
        response = propose_text(api, key, arguments_text)
        if inexact_numbers(parsed):
            assert response.status_code == 422, response.content
            assert [e["field"] for e in response.json()["errors"]] == [
                p or "arguments" for p in inexact_numbers(parsed)
            ]
            return
        assert response.status_code == 202, response.content
        row = ToolCall.objects.get(pk=response.json()["id"])
        assert arguments_hash(row.arguments) == row.arguments_hash == arguments_hash(parsed)
        assert arguments_hash(through_sqlite(sqlite, row.arguments)) == row.arguments_hash
        assert arguments_hash(through_sqlite(sqlite, parsed)) == row.arguments_hash
        # The stored form is the hashed form, int and float alike (sorted: jsonb orders keys its own way).
        assert json.dumps(row.arguments, sort_keys=True) == json.dumps(normalized(parsed), sort_keys=True)
        # The same arguments spelled as Python writes them are the same request: a replay.
        replay = propose_text(api, key, json.dumps(parsed))
        assert (replay.status_code, replay.json()["id"]) == (200, str(row.pk))

    hashes_agree()
    assert first_break() is None
    call_command("audit_verify")


@pytest.mark.django_db
def test_an_integral_number_for_an_integer_field_is_stored_as_an_integer(agent_api: Any) -> None:
    response = propose_text(
        agent_api(),
        "k-100",
        '{"pedido_id": "PED-00000001", "valor_centavos": 100.0, "motivo": "produto_defeituoso"}',
        "emitir_estorno",
    )

    assert response.status_code == 201, response.content
    stored = ToolCall.objects.get(pk=response.json()["id"]).arguments["valor_centavos"]
    assert (stored, type(stored)) == (100, int)


@pytest.mark.django_db
def test_the_same_key_with_200_and_200_point_0_is_a_replay_not_a_conflict(agent_api: Any) -> None:
    api = agent_api()
    first = api.propose(refund(200, idempotency_key="k-200"))

    again = propose_text(
        api,
        "k-200",
        '{"pedido_id": "PED-00000001", "valor_centavos": 200.0, "motivo": "produto_defeituoso"}',
        "emitir_estorno",
    )

    assert first.status_code == 201, first.content
    assert (again.status_code, again.json()["id"]) == (200, first.json()["id"])


@pytest.mark.django_db
def test_an_integer_no_json_number_holds_exactly_is_refused_naming_the_field(agent_api: Any) -> None:
    api = agent_api("visitor", {"search_seats": 0})

    response = propose_text(
        api, "k-big", '{"event_id": "show-sabado", "quantity": 2, "max_price_brl": 9007199254740993}', "search_seats"
    )

    assert response.status_code == 422, response.content
    body = response.json()
    assert body["error"] == "invalid_arguments"
    assert body["errors"] == [{"field": "max_price_brl", "problem": "must be a number JSON holds exactly"}]
    assert not ToolCall.objects.exists()


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_visitor_price_limit_of_1e16_runs_and_leaves_the_audit_chain_intact(
    celery_worker: CeleryWorker, demo_services: str, agent_api: Any
) -> None:
    api = agent_api("visitor", {"search_seats": 0})

    response = propose_text(
        api, "k-1e16", '{"event_id": "show-sabado", "quantity": 2, "max_price_brl": 1e16}', "search_seats"
    )
    body = api.get(response.json()["id"], wait=15).json()

    assert response.status_code == 201, response.content
    assert body["status"] == "succeeded", celery_worker.log()
    assert body["arguments"]["max_price_brl"] == 10**16
    actions = list(Event.objects.filter(call_id=body["id"]).order_by("seq").values_list("action", flat=True))
    assert actions == ["call.proposed", "call.execution_started", "call.executed", "call.succeeded"]
    assert first_break() is None
    call_command("audit_verify")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1e16, "10000000000000000"),
        (10**16, "10000000000000000"),
        (100.0, "100"),
        (-0.0, "0"),
        (1e-7, "1e-7"),
        (1e21, "1e+21"),
        (10**23, "1e+23"),  # the decimal value of the double written 1e+23
        (2**53 + 1, "9007199254740993"),  # no double is this integer: its exact digits
        (
            {"b": [1.0, "é\u202e"], "a": {"\U0001f600": 1, "\ufb01": 2}},
            '{"a":{"\U0001f600":1,"\ufb01":2},"b":[1,"é\u202e"]}',
        ),
    ],
)
def test_the_canonical_form_is_rfc_8785_with_integers_beyond_doubles_in_exact_digits(value: Any, text: str) -> None:
    assert canonical_json(value) == text
    assert canonical_json(normalized(value)) == text


@pytest.mark.django_db
def test_audit_data_that_postgresql_hands_back_in_another_spelling_verifies() -> None:
    for value in (1e16, 1e21, 1e-7, 123456789012345680000.0, 1.7976931348623157e308, 5e-324, 2**53 + 1):
        record_alone("test.numbers", actor=ACTOR, data={"value": value, "list": [value, 100.0]})

    assert first_break() is None
    call_command("audit_verify")


def tamper(sql: str, params: list[object]) -> None:
    """Change stored events as an attacker (or an older release) with database access would."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(sql, params)
        cursor.execute("SET LOCAL session_replication_role = origin")


def as_before(value: Any) -> str:
    """Return the JSON text events were hashed in before the canonical form."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def hash_as_before(event: Event, data: dict[str, Any]) -> str:
    """Return the hash the release before the canonical form gave `event` holding `data`."""
    fields = {**event.hashed_fields(), "data": data}
    return hashlib.sha256((event.prev_hash + as_before(fields)).encode()).hexdigest()


def write_as_before(data: dict[str, Any]) -> None:
    """Append an event as the release before the canonical form wrote it: `data` hashed in its text."""
    event = record_alone("test.before", actor=ACTOR, data={})
    seal_all()
    event.refresh_from_db()
    with transaction.atomic():  # no digest: the hash covers the content itself, as before the sequencer
        tamper(
            "UPDATE audit_event SET data = %s, hash = %s, digest = NULL WHERE seq = %s",
            [as_before(data), hash_as_before(event, data), event.seq],
        )


@pytest.mark.django_db
def test_events_hashed_in_the_earlier_form_still_verify_and_an_edit_is_still_named() -> None:
    write_as_before({"valor_centavos": 100.0, "motivo": "ação ✓", "rate": 1.5})
    # The bug this form fixes: 1e16 hashed as "1e+16", which jsonb hands back as 10000000000000000.
    write_as_before({"max_price_brl": 1e16})
    record_alone("test.after", actor=ACTOR, data={"max_price_brl": 1e16, "valor_centavos": 100.0})
    seal_all()

    assert first_break() is None
    call_command("audit_verify")
    with transaction.atomic():
        tamper("UPDATE audit_event SET data = %s WHERE seq = 2", ['{"max_price_brl": 1e15}'])
    assert first_break().seq == 2
