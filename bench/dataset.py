"""Bulk data for the reviewer pages and audit_verify: pending calls and a valid audit hash chain.

Pending calls are one INSERT … SELECT over generate_series. Audit events must chain
(audit_verify walks them), so their hashes are computed here with the product's own
`audit.chain.event_hash` and the rows are COPYed in, after the chain's head, under
the chain's advisory lock. The append-only triggers refuse UPDATE, DELETE and
TRUNCATE; INSERT and COPY pass.
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
    approved_arguments_hash, attempts, created_at, expires_at
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
    '', 0, now() - make_interval(secs => i * 0.01), now() + interval '4 hours'
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
    """Yield `count` chained events after the head: proposals, approvals, executions, like real traffic."""
    from audit.canonical import canonical_json
    from audit.hashing import event_hash
    from audit.models import Event

    prev = head_hash
    for offset in range(1, count + 1):
        seq = head_seq + offset
        created_at = head_time + timedelta(microseconds=offset)
        call_id = uuid.UUID(int=seq)
        action, actor, data = _event_content(seq)
        fields = Event.fields_to_hash(
            seq, created_at, actor[0], actor[1], action, call_id, "support-agent", "emitir_estorno", data
        )
        digest = event_hash(prev, fields)
        yield (seq, created_at, actor[0], actor[1], action, call_id, "support-agent", "emitir_estorno",
               canonical_json(data), prev, digest)  # fmt: skip
        prev = digest


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
    """Return how many audit events there are (the head's seq: the chain has no gaps)."""
    from audit.models import Event

    return Event.objects.order_by("-seq").values_list("seq", flat=True).first() or 0


def top_up_events(total: int) -> int:
    """COPY chained events after the head until there are `total`; return how many were added."""
    from django.db import connection, transaction

    from audit.hashing import GENESIS_HASH
    from audit.models import HASHED_FIELDS

    columns = ", ".join((*HASHED_FIELDS, "prev_hash", "hash"))  # the order event_rows() yields

    with transaction.atomic(), connection.cursor() as cursor:
        # No writer chains meanwhile, however it reads the head: the table lock holds every
        # reader and writer of the chain until this commits (the chain's own lock is audit's).
        cursor.execute("LOCK TABLE audit_event IN ACCESS EXCLUSIVE MODE")
        cursor.execute("SELECT seq, hash, created_at FROM audit_event ORDER BY seq DESC LIMIT 1")
        head = cursor.fetchone() or (0, GENESIS_HASH, datetime.now(UTC))
        missing = total - head[0]
        if missing <= 0:
            return 0
        rows = event_rows(head[0], head[1], head[2].astimezone(UTC), missing)
        with cursor.cursor.copy(f"COPY audit_event ({columns}) FROM STDIN") as copy:
            batch: list[str] = []
            for row in rows:
                batch.append(_copy_line(row))
                if len(batch) >= COPY_BATCH:
                    copy.write("".join(batch))
                    batch.clear()
            copy.write("".join(batch))
    return missing


def analyze() -> None:
    """VACUUM ANALYZE the loaded tables, as autovacuum would after a bulk load."""
    from django.db import connection

    with connection.cursor() as cursor:
        for table in ("approvals_toolcall", "audit_event"):
            cursor.execute(f"VACUUM ANALYZE {table}")
