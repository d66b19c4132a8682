"""Bulk data for the reviewer pages and audit_verify: pending calls and a valid audit hash chain.

Pending calls are one INSERT … SELECT over generate_series. Audit events must chain
(audit_verify walks them), so they are sealed here as the sequencer seals, with the
product's own `content_digest` and `sealed_hash`, and COPYed in after the sealed head,
holding the sealers' lock and the table. The triggers refuse an event inserted
sealed: the bulk load switches that one trigger off for its own transaction (as the
table's owner), as a restore of a dump would.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

COPY_BATCH = 20_000

PENDING_SQL = """
INSERT INTO approvals_toolcall (
    id, agent_id, tool_id, tool_version, arguments, arguments_hash, request_hash, idempotency_key,
    conversation_id, justification, status, risk_tier, risk_reasons, approvals_required,
    approved_arguments_hash, attempts, created_at, expires_at, traceparent, tracestate
)
SELECT
    gen_random_uuid(), %(agent)s, %(tool)s, %(version)s,
    jsonb_build_object(
        'pedido_id', 'PED-' || lpad((i %% 100000000)::text, 8, '0'),
        'valor_centavos', 20001 + (i * 7919) %% 600000,
        'motivo', 'atraso_entrega',
        'idempotency_key', md5(i::text)
    ),
    md5('a' || i) || md5('b' || i), md5('r' || i) || md5('s' || i), 'bench-seed-' || i,
    '', 'Bulk-loaded by make bench.', 'pending_approval',
    CASE WHEN 20001 + (i * 7919) %% 600000 > 500000 THEN 3 ELSE 2 END,
    '[{"rule": "above-autonomy", "tier": 2, "description": "Refunds above R$ 200,00 need one reviewer."}]'::jsonb,
    CASE WHEN 20001 + (i * 7919) %% 600000 > 500000 THEN 2 ELSE 1 END,
    '', 0, now() - make_interval(secs => i * 0.01), now() + interval '4 hours', '', ''
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS i  -- psycopg sends small numbers as smallint
"""


def pending_count() -> int:
    """Return how many calls wait for a reviewer."""
    from approvals.models import Status, ToolCall

    return ToolCall.objects.filter(status=Status.PENDING_APPROVAL).count()


def top_up_pending(total: int) -> int:
    """Insert pending tier-2/3 refund calls until `total` are pending; return how many were added."""
    from django.db import connection

    from toolcatalog.models import Tool

    missing = total - pending_count()
    if missing <= 0:
        return 0
    tool = Tool.objects.get(name="emitir_estorno")
    agent_id = tool.grants.get(agent__name="support-agent").agent_id
    first = _next_seed_number()
    with connection.cursor() as cursor:
        params = {"agent": agent_id, "tool": tool.pk, "version": tool.version, "first": first}
        cursor.execute(PENDING_SQL, {**params, "last": first + missing - 1})
    return missing


def _next_seed_number() -> int:
    from approvals.models import ToolCall

    return ToolCall.objects.filter(idempotency_key__startswith="bench-seed-").count() + 1


def event_rows(head_seq: int, head_hash: str, head_time: datetime, count: int) -> Iterator[tuple[Any, ...]]:
    """Yield `count` sealed events after the head: proposals, approvals, executions, like real traffic."""
    from audit.canonical import canonical_json
    from audit.hashing import content_digest, sealed_hash
    from audit.models import Event

    prev = head_hash
    for offset in range(1, count + 1):
        seq = head_seq + offset
        created_at = head_time + timedelta(microseconds=offset)
        call_id = uuid.UUID(int=seq)
        action, actor, data = _event_content(seq)
        content = Event.fields_to_hash(
            seq, created_at, actor[0], actor[1], action, call_id, "support-agent", "emitir_estorno", data
        )
        del content["seq"]
        digest = content_digest(content)
        chained = sealed_hash(prev, seq, digest)
        yield (seq, created_at, actor[0], actor[1], action, call_id, "support-agent", "emitir_estorno",
               canonical_json(data), digest, prev, chained, created_at)  # fmt: skip
        prev = chained


def _event_content(seq: int) -> tuple[str, tuple[str, str], dict[str, Any]]:
    """Return (action, actor, data) for event `seq`: a call's life in four events."""
    step = seq % 4
    if step == 0:
        return "call.proposed", ("agent", "support-agent"), _proposed_data(seq)
    if step == 1:
        transition = {"from": ["pending_approval"], "to": "approved", "approvals": 1}
        return "call.approved", ("reviewer", "alice"), transition
    if step == 2:
        return "call.executing", ("system", "gatehouse"), {"from": ["approved"], "to": "executing", "attempt": 1}
    verified = {"confirmed": True, "detail": "Refund found in the ledger."}
    return (
        "call.succeeded",
        ("system", "gatehouse"),
        {"from": ["executing"], "to": "succeeded", "verification": verified},
    )


def _proposed_data(seq: int) -> dict[str, Any]:
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


def _copy_line(row: tuple[Any, ...]) -> str:
    """Return one row in COPY's text format (\\N for NULL; backslash, tab and newlines escaped)."""
    cells = []
    for value in row:
        if value is None:
            cells.append("\\N")
            continue
        text = value.isoformat() if isinstance(value, datetime) else str(value)
        cells.append(text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r"))
    return "\t".join(cells) + "\n"


def event_count() -> int:
    """Return how many audit events there are, sealed (the head's seq: the chain has no gaps) or waiting."""
    from audit.models import Event
    from audit.store import unsealed_count

    head = Event.objects.filter(seq__isnull=False).order_by("-seq").values_list("seq", flat=True).first()
    return (head or 0) + unsealed_count()


def top_up_events(total: int) -> int:
    """Seal what waits, then COPY sealed events after the head until there are `total`; return how many were added."""
    from django.db import connection, transaction

    from audit import store
    from audit.models import HASHED_FIELDS
    from audit.sequencer import seal_all

    # The order event_rows() yields.
    columns = ", ".join((*HASHED_FIELDS, "digest", "prev_hash", "hash", "sealed_at"))
    with transaction.atomic(), connection.cursor() as cursor:
        # The sealers' lock first, as every sealer takes it, then the table: no sealer chains
        # meanwhile, and no writer inserts, until this commits.
        store.lock_sealing()
        cursor.execute("LOCK TABLE audit_event IN ACCESS EXCLUSIVE MODE")
        seal_all()
        head_seq, head_hash = store.sealed_head()
        head_time = stamped_at(head_seq)
        missing = total - head_seq
        if missing <= 0:
            return 0
        cursor.execute(f"ALTER TABLE audit_event DISABLE TRIGGER {INSERTED_UNSEALED}")
        copy_rows(
            cursor, f"COPY audit_event ({columns}) FROM STDIN", event_rows(head_seq, head_hash, head_time, missing)
        )
        cursor.execute(f"ALTER TABLE audit_event ENABLE TRIGGER {INSERTED_UNSEALED}")
    return missing


# The trigger that refuses an event inserted sealed (audit/migrations/0006_seal_once_triggers.py).
INSERTED_UNSEALED = "audit_event_inserted_unsealed"


def stamped_at(seq: int) -> datetime:
    """Return when event `seq` was stamped (now for an empty chain): the bulk events are stamped after it."""
    from audit.models import Event

    stamped = Event.objects.filter(seq=seq).values_list("created_at", flat=True).first() if seq else None
    return (stamped or datetime.now(UTC)).astimezone(UTC)


def copy_rows(cursor: Any, statement: str, rows: Iterator[tuple[Any, ...]]) -> None:
    """Send `rows` through one COPY … FROM STDIN, in batches of COPY_BATCH lines."""
    with cursor.cursor.copy(statement) as copy:
        batch: list[str] = []
        for row in rows:
            batch.append(_copy_line(row))
            if len(batch) >= COPY_BATCH:
                copy.write("".join(batch))
                batch.clear()
        copy.write("".join(batch))


def analyze() -> None:
    """VACUUM ANALYZE the loaded tables, as autovacuum would after a bulk load."""
    from django.db import connection

    with connection.cursor() as cursor:
        for table in ("approvals_toolcall", "audit_event"):
            cursor.execute(f"VACUUM ANALYZE {table}")
