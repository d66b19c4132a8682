"""Bulk data for the reviewer pages and audit_verify: pending calls and a valid audit hash chain.

Pending calls are one INSERT … SELECT over generate_series. Audit events must chain
(audit_verify walks them), so they are sealed here as the sequencer seals: the
SHA-256 of their canonical content (`content_digest`), chained (`sealed_hash`), and
COPYed in after the sealed head, holding the sealers' lock and the table. Ten million
of them are too many for `canonical_json`: their content, four fixed shapes, is
written by string formatting into the very same text (bench/tests/test_dataset.py
proves it against the product's functions). The triggers refuse an event inserted
sealed: the bulk load switches that one trigger off for its own transaction (as the
table's owner), and a load that at least doubles the table builds the plain indexes
after the rows, as a restore of a dump would.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
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


# A bulk event's content (every hashed field but seq) in its canonical JSON (RFC 8785), by the event's step in a
# call's life (seq % 4): the keys sorted, no spaces, and only ASCII strings without escapes, integers, true and null,
# so string formatting writes exactly `canonical_json`'s text (bench/tests/test_dataset.py holds the dict forms
# and proves it) at a fraction of its cost: ten million events are sealed here.
PROPOSED_DATA = (
    '{"arguments":{"motivo":"atraso_entrega","pedido_id":"PED-%08d","valor_centavos":%d},"arguments_hash":"%064x",'
    '"call_index":null,"conversation_id":"","idempotency_key":"bench-%d",'
    '"justification":"Customer waited three weeks.",'
    '"risk_reasons":[{"description":"Refunds above R$ 200,00.","rule":"above-autonomy","tier":2}],"risk_tier":2,'
    '"status":"pending_approval","step":null,"tool_version":1}'
)
# (action, actor_kind, actor_name, data or None for PROPOSED_DATA) by seq % 4.
STEPS = (
    ("call.proposed", "agent", "support-agent", None),
    ("call.approved", "reviewer", "alice", '{"approvals":1,"from":["pending_approval"],"to":"approved"}'),
    ("call.executing", "system", "gatehouse", '{"attempt":1,"from":["approved"],"to":"executing"}'),
    (
        "call.succeeded",
        "system",
        "gatehouse",
        '{"from":["executing"],"to":"succeeded",'
        '"verification":{"confirmed":true,"detail":"Refund found in the ledger."}}',
    ),
)
# The content, its keys in order, up to the call_id's text: by step; then call_id, created_at, data, tool_name.
CONTENT_HEADS = tuple(
    f'{{"action":"{action}","actor_kind":"{kind}","actor_name":"{name}","agent_name":"support-agent","call_id":"'
    for action, kind, name, _ in STEPS
)
CONTENT_TAIL = ',"tool_name":"emitir_estorno"}'
# call_id is uuid.UUID(int=seq): its text, for every seq below 16**12.
CALL_ID = "00000000-0000-0000-0000-%012x"
MAX_SEQ = 16**12 - 1
# The columns of event_lines(), in order: the hashed fields, then the seal.
EVENT_COLUMNS = (
    "seq", "created_at", "actor_kind", "actor_name", "action", "call_id", "agent_name", "tool_name", "data",
    "digest", "prev_hash", "hash", "sealed_at",
)  # fmt: skip


def event_data(seq: int) -> str:
    """Return the canonical JSON of bulk event `seq`'s data."""
    data = STEPS[seq % 4][3]
    if data is not None:
        return data
    return PROPOSED_DATA % (seq % 10**8, 20001 + (seq * 7919) % 600000, seq, seq)


def event_content(seq: int, created: str, call: str, data: str) -> str:
    """Return the canonical JSON of bulk event `seq`'s content: what its digest covers (`content_digest`)."""
    return f'{CONTENT_HEADS[seq % 4]}{call}","created_at":"{created}","data":{data}{CONTENT_TAIL}'


def stamps(after: datetime, count: int) -> Iterator[str]:
    """Yield the isoformat() text of `after` (UTC) plus 1, 2, … `count` microseconds, a second's prefix at a time."""
    first = after.astimezone(UTC) + timedelta(microseconds=1)
    second, micro = first.replace(microsecond=0), first.microsecond
    while count > 0:
        prefix = second.isoformat()[:-6]  # without "+00:00"
        block = min(count, 1_000_000 - micro)
        for us in range(micro, micro + block):
            yield f"{prefix}.{us:06d}+00:00" if us else f"{prefix}+00:00"
        count -= block
        second, micro = second + timedelta(seconds=1), 0


def event_lines(head_seq: int, head_hash: str, head_time: datetime, count: int) -> Iterator[str]:
    """Yield `count` sealed events after the head as COPY text lines (EVENT_COLUMNS): a call's life in four events.

    Each is stamped a microsecond after the one before and sealed as the sequencer
    seals: the digest of its content, chained to the hash before it.
    """
    if head_seq + count > MAX_SEQ:
        raise ValueError(f"bulk events stop at seq {MAX_SEQ:,}")
    sha256, prev, seq = hashlib.sha256, head_hash, head_seq
    for created in stamps(head_time, count):
        seq += 1
        action, kind, name, _ = STEPS[seq % 4]
        call, data = CALL_ID % seq, event_data(seq)
        digest = sha256(event_content(seq, created, call, data).encode()).hexdigest()
        chained = sha256(f"{prev}\n{seq}\n{digest}".encode()).hexdigest()
        yield (
            f"{seq}\t{created}\t{kind}\t{name}\t{action}\t{call}\tsupport-agent\temitir_estorno\t{data}\t"
            f"{digest}\t{prev}\t{chained}\t{created}\n"
        )
        prev = chained


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
    from audit.sequencer import seal_all

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
        lines = event_lines(head_seq, head_hash, head_time, missing)
        with indexes_built_after(cursor, "audit_event", rebuild=missing >= REBUILD_RATIO * head_seq):
            copy_lines(cursor, f"COPY audit_event ({', '.join(EVENT_COLUMNS)}) FROM STDIN", lines)
        cursor.execute(f"ALTER TABLE audit_event ENABLE TRIGGER {INSERTED_UNSEALED}")
    return missing


# A load that adds this many times the events already there drops the plain indexes and builds them after.
REBUILD_RATIO = 1

# The table's indexes that back no constraint (its primary key and seq's uniqueness stay, and are checked row by row).
PLAIN_INDEXES_SQL = """
SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid) FROM pg_index i
WHERE i.indrelid = %s::regclass AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)
"""


@contextmanager
def indexes_built_after(cursor: Any, table: str, rebuild: bool = True) -> Iterator[None]:
    """Run the load inside with `table`'s plain indexes dropped, then build them again, as pg_restore does.

    One sorted build per index instead of an insert into each for every row. Inside
    the caller's transaction: if the load fails, the drops roll back with it.
    """
    if not rebuild:
        yield
        return
    cursor.execute(PLAIN_INDEXES_SQL, [table])
    indexes = cursor.fetchall()
    for name, _ in indexes:
        cursor.execute(f"DROP INDEX {name}")
    yield
    cursor.execute(f"SET LOCAL maintenance_work_mem = '{INDEX_BUILD_MEMORY}'")
    for _, definition in indexes:
        cursor.execute(definition)


INDEX_BUILD_MEMORY = "512MB"

# The trigger that refuses an event inserted sealed (audit/migrations/0006_seal_once_triggers.py).
INSERTED_UNSEALED = "audit_event_inserted_unsealed"


def stamped_at(seq: int) -> datetime:
    """Return when event `seq` was stamped (now for an empty chain): the bulk events are stamped after it."""
    from audit.models import Event

    stamped = Event.objects.filter(seq=seq).values_list("created_at", flat=True).first() if seq else None
    return (stamped or datetime.now(UTC)).astimezone(UTC)


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


def copy_rows(cursor: Any, statement: str, rows: Iterable[tuple[Any, ...]]) -> None:
    """Send `rows` through one COPY … FROM STDIN."""
    copy_lines(cursor, statement, map(_copy_line, rows))


def copy_lines(cursor: Any, statement: str, lines: Iterable[str]) -> None:
    """Send COPY text `lines` through one COPY … FROM STDIN, COPY_BATCH lines a write."""
    with cursor.cursor.copy(statement) as copy:
        batch: list[str] = []
        for line in lines:
            batch.append(line)
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
