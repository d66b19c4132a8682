"""The pages scenario's audit events are COPYed onto the chain (bench.dataset.top_up_events): it must still verify.

The loader writes each event's canonical JSON by string formatting, not through
`canonical_json`: the events here are also written the slow, exact way, as dicts,
and must come out the same text, digest and hash.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from audit.canonical import canonical_json
from audit.chain import first_break, record_alone
from audit.hashing import GENESIS_HASH, content_digest, sealed_hash
from audit.models import Event
from bench import dataset, sealing

SHAPE_EVENTS = 4_000


def reference_content(seq: int) -> tuple[str, tuple[str, str], dict[str, Any]]:
    """Return (action, actor, data) of bulk event `seq` as dicts: a call's life in four events."""
    step = seq % 4
    if step == 0:
        return "call.proposed", ("agent", "support-agent"), reference_proposal(seq)
    if step == 1:
        return "call.approved", ("reviewer", "alice"), {"from": ["pending_approval"], "to": "approved", "approvals": 1}
    if step == 2:
        return "call.executing", ("system", "gatehouse"), {"from": ["approved"], "to": "executing", "attempt": 1}
    verified = {"confirmed": True, "detail": "Refund found in the ledger."}
    return (
        "call.succeeded",
        ("system", "gatehouse"),
        {"from": ["executing"], "to": "succeeded", "verification": verified},
    )


def reference_proposal(seq: int) -> dict[str, Any]:
    amount = 20001 + (seq * 7919) % 600000
    return {
        "status": "pending_approval",
        "risk_tier": 2,
        "risk_reasons": [{"rule": "above-autonomy", "tier": 2, "description": "Refunds above R$ 200,00."}],
        "tool_version": 1,
        "arguments": {"pedido_id": f"PED-{seq % 10**8:08d}", "valor_centavos": amount, "motivo": "atraso_entrega"},
        "arguments_hash": f"{seq:064x}",
        "idempotency_key": f"bench-{seq}",
        "conversation_id": "",
        "step": None,
        "call_index": None,
        "justification": "Customer waited three weeks.",
    }


def reference_fields(seq: int, created_at: datetime) -> dict[str, object]:
    """Return event `seq`'s hashed fields but seq, as the product builds them."""
    action, actor, data = reference_content(seq)
    fields = Event.fields_to_hash(
        seq, created_at, actor[0], actor[1], action, uuid.UUID(int=seq), "support-agent", "emitir_estorno", data
    )
    del fields["seq"]
    return fields


def test_the_formatted_events_are_the_canonical_json_digest_and_hash_of_their_content() -> None:
    # Just before a second ends: the stamps cross it, microsecond 0 (no fraction in isoformat()) included.
    head_time = datetime(2026, 12, 4, 14, 59, 59, 998_500, tzinfo=UTC)
    head_seq, prev = 7, "ab" * 32
    lines = list(dataset.event_lines(head_seq, prev, head_time, SHAPE_EVENTS))

    assert len(lines) == SHAPE_EVENTS
    for offset, line in enumerate(lines, start=1):
        seq, created_at = head_seq + offset, head_time + timedelta(microseconds=offset)
        fields = reference_fields(seq, created_at)
        cells = line.removesuffix("\n").split("\t")
        row = dict(zip(dataset.EVENT_COLUMNS, cells, strict=True))
        content = dataset.event_content(seq, row["created_at"], row["call_id"], row["data"])

        assert content == canonical_json(fields)
        assert row["data"] == canonical_json(fields["data"])
        assert json.loads(row["data"]) == fields["data"]
        assert [row[name] for name in ("seq", "created_at", "call_id", "sealed_at")] == [
            str(seq),
            created_at.isoformat(),
            fields["call_id"],
            created_at.isoformat(),
        ]
        assert [row[name] for name in ("actor_kind", "actor_name", "action", "agent_name", "tool_name")] == [
            fields[name] for name in ("actor_kind", "actor_name", "action", "agent_name", "tool_name")
        ]
        assert row["digest"] == content_digest(fields)
        assert row["prev_hash"] == prev
        assert row["hash"] == sealed_hash(prev, seq, row["digest"])
        prev = row["hash"]


def test_the_formatted_events_need_no_copy_escapes() -> None:
    lines = dataset.event_lines(0, GENESIS_HASH, datetime.now(UTC), 8)

    assert all(line.count("\t") == len(dataset.EVENT_COLUMNS) - 1 and "\\" not in line for line in lines)


def test_backlog_events_carry_the_digest_of_their_canonical_content() -> None:
    for n, row in enumerate(sealing.backlog_rows(400)):
        created_at, kind, name, action, call_id, agent, tool, data, digest = row
        fields = Event.fields_to_hash(n, created_at, kind, name, action, call_id, agent, tool, json.loads(data))
        del fields["seq"]

        assert fields == reference_fields(n, datetime.fromisoformat(created_at))
        assert digest == content_digest(fields)


@pytest.mark.django_db
def test_topped_up_events_extend_the_chain_without_a_break() -> None:
    record_alone("bench.before", actor=("system", "bench"))

    added = dataset.top_up_events(40)
    record_alone("bench.after", actor=("system", "bench"))

    assert added == 39
    assert Event.objects.count() == 41
    assert first_break() is None


@pytest.mark.django_db
def test_audit_verify_passes_on_a_loaded_chain() -> None:
    record_alone("bench.before", actor=("system", "bench"))
    dataset.top_up_events(3_000)
    out = StringIO()

    call_command("audit_verify", stdout=out)

    assert "audit chain intact: 3000 events" in out.getvalue()


@pytest.mark.django_db
def test_a_chain_already_long_enough_is_left_as_it_is() -> None:
    dataset.top_up_events(5)

    assert dataset.top_up_events(3) == 0
    assert Event.objects.count() == 5


def audit_indexes() -> dict[str, int]:
    """Return audit_event's indexes: each one's definition and oid (a rebuilt index has a new oid)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_indexdef(indexrelid), indexrelid FROM pg_index WHERE indrelid = 'audit_event'::regclass"
        )
        return dict(cursor.fetchall())


@pytest.mark.django_db
def test_a_load_that_rebuilds_the_indexes_leaves_every_index_as_it_was() -> None:
    before = audit_indexes()
    record_alone("bench.before", actor=("system", "bench"))

    dataset.top_up_events(500)  # 499 added after 1 event: dropped, loaded, built again
    after = audit_indexes()

    assert after.keys() == before.keys()
    assert len(before) == 8
    assert after != before
    assert first_break() is None


@pytest.mark.django_db
def test_a_small_top_up_of_a_long_chain_loads_through_the_indexes() -> None:
    dataset.top_up_events(300)
    before = audit_indexes()

    assert dataset.top_up_events(330) == 30  # 30 after 300: the indexes stay
    assert audit_indexes() == before
    assert first_break() is None
