"""A proposal's reads and writes in PostgreSQL's own statements, beside their portable twins.

Every proposal reads its agent and grant, then stores the call, spends its budgets
and chains its `call.proposed` event. On PostgreSQL this module does that in three
round trips: one statement reads the agent, its grant, the tool, the tool's base
tier, its circuit breaker and every tier (`authenticate_with_grant`); one message
carries BEGIN, the INSERT, the budgets' upserts, the event's INSERT (unsealed: the
sequencer chains it later) and the COMMIT (`commit_proposed`). The twins — the ORM's `Agent.authenticate`,
`agents.grants.find_grant`, `agents.budgets.spend`, `audit.chain.record_event`
— run on SQLite, and on PostgreSQL with `GATEHOUSE_POSTGRESQL_STORE` off, in the
same order on the same rows, so both give the same data. docs/benchmarks.md gives
the same-run A/B that keeps this module.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from datetime import datetime, timedelta
from typing import TypeVar

import psycopg
from django.db import DEFAULT_DB_ALIAS, IntegrityError, connection, connections, models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.utils import timezone
from psycopg.pq import TransactionStatus

from agents.budgets import Budget, BudgetExhausted, first_spent_out, seconds_left, spend
from agents.grants import ReadGrant, find_grant
from agents.models import USED_WITHIN_CAP, Agent, BudgetCounter, CircuitBreaker, Grant, hash_token
from approvals.models import StandingApproval, ToolCall
from audit import store as chain_store
from audit.chain import record_event, recorded
from audit.models import Event
from audit.typealiases import SQLValue
from toolcatalog.models import RiskTier, Tool
from toolcatalog.policy import TierSpec

RowModel = TypeVar("RowModel", bound=models.Model)


# ------------------------------------------------------------------ the agent and its grant


def authenticate_with_grant(token: str, tool_name: str) -> tuple[Agent | None, ReadGrant]:
    """Return the active agent holding `token` and its grant for the enabled tool `tool_name`.

    The grant comes annotated as `find_grant` annotates it, and here also with every
    tier (`tier_specs`), so judging the proposal reads nothing more. The agent is
    touched as `Agent.authenticate` does.
    """
    if not chain_store.postgresql_statements():
        agent = Agent.authenticate(token)
        return agent, ReadGrant(tool_name, None if agent is None else find_grant(agent, tool_name))
    row = None
    if token:
        with connection.cursor() as cursor:
            cursor.execute(_agent_and_grant_sql(), [tool_name, hash_token(token)])
            row = cursor.fetchone()
    if row is None:
        return None, ReadGrant(tool_name, None)
    size = len(Agent._meta.concrete_fields)
    agent = instance_from_row(Agent, row[:size])
    agent.touch()
    grant_row = row[size:]
    return agent, ReadGrant(tool_name, None if grant_row[0] is None else _grant_from_row(agent, grant_row))


def column_list(model: type[models.Model], alias: str) -> str:
    """Return the model's concrete columns, quoted, in field order: what `instance_from_row` takes back."""
    return ", ".join(f"{alias}.{connection.ops.quote_name(field.column)}" for field in model._meta.concrete_fields)


def instance_from_row(model: type[RowModel], values: Sequence[SQLValue]) -> RowModel:
    """Build a model instance from its concrete columns' values, in field order, converted as the ORM would."""
    fields = model._meta.concrete_fields
    db = current_database()
    converted = [
        field.from_db_value(value, None, db) if hasattr(field, "from_db_value") else value
        for field, value in zip(fields, values, strict=True)
    ]
    return model.from_db(db.alias, _attnames(model), converted)


def current_database() -> BaseDatabaseWrapper:
    """Return this thread's default database connection itself, not `django.db.connection`.

    The proxy looks the connection up again (a thread-local read) on every attribute;
    converting a row's values touches it once a field, which cost more than the values.
    """
    return connections[DEFAULT_DB_ALIAS]


@functools.cache
def _attnames(model: type[models.Model]) -> list[str]:
    return [field.attname for field in model._meta.concrete_fields]


def _table(model: type[models.Model]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


@functools.cache
def _agent_and_grant_sql() -> str:
    """Return the one statement that reads the agent by its token hash with its grant for a tool by name.

    The grant's side of the join is inner (grant, its enabled tool by that name, the
    tool's base tier); the agent's is outer, so an agent without that grant still
    comes back. It also says whether a standing approval could cover a call
    (`approvals.standing.may_cover`), so a held proposal reads nothing more.
    Column and table names come from the models; values are parameters.
    """
    breakers = f"FROM {_table(CircuitBreaker)} b WHERE b.agent_id = g.agent_id AND b.tool_id = g.tool_id"
    return f"""
SELECT {column_list(Agent, "a")}, {column_list(Grant, "g")}, {column_list(Tool, "t")}, {column_list(RiskTier, "bt")},
       EXISTS(SELECT 1 {breakers} AND b.opened_at IS NOT NULL),
       (SELECT b.consecutive_failures {breakers} LIMIT 1),
       (SELECT json_agg(json_build_array(r.level, r.name, r.requires_approval, r.approvals_required,
                                         extract(epoch FROM r.approval_window)))::text
        FROM {_table(RiskTier)} r),
       EXISTS(SELECT 1 FROM {_table(StandingApproval)} s
              WHERE s.agent_id = a.id AND s.tool_id = t.id AND s.tool_version = t.version
                AND s.activated_at IS NOT NULL AND s.revoked_at IS NULL AND s.expires_at > now()
                AND s.uses < s.max_uses)
FROM {_table(Agent)} a
LEFT JOIN ({_table(Grant)} g
           JOIN {_table(Tool)} t ON t.id = g.tool_id AND t.name = %s AND t.enabled
           JOIN {_table(RiskTier)} bt ON bt.id = t.base_tier_id) ON g.agent_id = a.id
WHERE a.token_hash = %s AND a.active
LIMIT 1
"""  # noqa: S608


def _grant_from_row(agent: Agent, row: Sequence[SQLValue]) -> Grant:
    """Build the annotated grant from the grant's part of the row."""
    sizes = [len(model._meta.concrete_fields) for model in (Grant, Tool, RiskTier)]
    grant = instance_from_row(Grant, row[: sizes[0]])
    tool = instance_from_row(Tool, row[sizes[0] : sizes[0] + sizes[1]])
    tool.base_tier = instance_from_row(RiskTier, row[sizes[0] + sizes[1] : sum(sizes)])
    grant.tool = tool
    grant.agent = agent
    grant.breaker_open, grant.breaker_failures, tiers, grant.standing_possible = row[sum(sizes) :]
    grant.tier_specs = {
        level: TierSpec(level, name, requires, required, timedelta(seconds=float(window)))
        for level, name, requires, required, window in json.loads(tiers or "[]")
    }
    return grant


# ------------------------------------------------------------------ storing the call


def commit_proposed(
    call: ToolCall, budgets: list[Budget], now: datetime, event: Event, also: Callable[[], None] | None = None
) -> None:
    """Insert `call`, spend one call from each of `budgets`, insert `event`: one transaction, committed on return.

    In this order on both paths: the call's unique key decides a duplicate first
    (IntegrityError: nothing spent), then the counter rows, then the event. The
    portable twin runs inside a caller's transaction (which then commits it all),
    and where the proposal writes more (`also`, in the same transaction).
    """
    if also is not None or not chain_store.postgresql_statements() or connection.in_atomic_block:
        with transaction.atomic():
            call.save(force_insert=True)
            spend(call.agent, budgets, now)
            record_event(event)
            if also is not None:
                also()
        return
    _commit_in_one_message(call, budgets, event)
    call._state.adding = False
    call._state.db = connection.alias
    recorded(event)


# Transaction states in which a failed message left the transaction open (and aborted).
_OPEN = (TransactionStatus.INTRANS, TransactionStatus.INERROR)


def _commit_in_one_message(call: ToolCall, budgets: list[Budget], event: Event) -> None:
    """PostgreSQL: BEGIN, the INSERT with the budgets' upserts, the event's INSERT and COMMIT, one message.

    A failed statement skips the rest and leaves the transaction to roll back: a
    taken key raises IntegrityError, a spent-out budget (the counter's `used <= cap`
    constraint) BudgetExhausted.
    """
    connection.ensure_connection()
    conn = connection.connection
    with ExitStack() as cursors:
        statements, appending = (cursors.enter_context(connection.cursor()) for _ in range(2))
        try:
            with connection.wrap_database_errors, conn.pipeline():
                statements.execute("BEGIN")
                _queue_insert(statements, call, budgets)
                chain_store.queue_insert(appending, event)
                statements.execute("COMMIT")
        except Exception as error:
            if conn.info.transaction_status in _OPEN:  # the failed statement left it open, and aborted
                with connection.wrap_database_errors:
                    conn.rollback()
            if isinstance(error, IntegrityError) and _spent_out(error):
                raise BudgetExhausted(*_which_spent_out(call.agent, budgets)) from error
            raise
        chain_store.inserted(event, appending.fetchone())


def _spend_sql(previous: str) -> str:
    """Return the upsert that spends one call from a budget, counted against its limit (`cap`), once per row of
    `previous` (the statement before it: one row)."""
    return f"""
INSERT INTO {_table(BudgetCounter)} AS c (agent_id, scope, key, used, cap) SELECT %s, %s, %s, 1, %s FROM {previous}
ON CONFLICT (agent_id, scope, key) DO UPDATE SET used = c.used + 1, cap = EXCLUDED.cap
"""  # noqa: S608 — the table's name only


def _spent_out(error: IntegrityError) -> bool:
    cause = error.__cause__
    return isinstance(cause, psycopg.errors.CheckViolation) and cause.diag.constraint_name == USED_WITHIN_CAP


def _which_spent_out(agent: Agent, budgets: list[Budget]) -> tuple[Budget, int | None]:
    """Return the first of `budgets` with no call left, and when it refills (read after the refusal)."""
    now = timezone.now()
    spent_out = first_spent_out(agent, budgets, now)
    budget = spent_out.budget if spent_out is not None else budgets[-1]
    return budget, seconds_left(budget, now)


def _queue_insert(cursor: CursorWrapper, call: ToolCall, budgets: list[Budget]) -> None:
    """Queue the call's INSERT as the ORM would write it, spending `budgets` in the same statement.

    Each value is prepared by its field, for this connection.
    """
    db = cursor.db  # the connection itself: its proxy would be looked up again for every field
    values = [field.get_db_prep_save(field.pre_save(call, True), db) for field in ToolCall._meta.concrete_fields]
    for budget in budgets:
        values += [call.agent_id, budget.scope, budget.key, budget.limit]
    cursor.execute(_insert_sql(len(budgets)), values)


@functools.cache
def _insert_sql(budget_count: int) -> str:
    """Return the call's INSERT followed, in one statement, by the upserts of `budget_count` budgets.

    Each step reads the row the step before returned, so PostgreSQL runs them in that
    order (the call's unique key first, then the counters in the budgets' order); any
    one failing fails the statement. One statement rather than several spares each its
    trip through the driver; the model does not change, so it is built once.
    """
    fields = ToolCall._meta.concrete_fields
    columns = ", ".join(connection.ops.quote_name(field.column) for field in fields)
    placeholders = ", ".join(["%s"] * len(fields))
    insert = f"INSERT INTO {_table(ToolCall)} ({columns}) VALUES ({placeholders})"  # noqa: S608
    if budget_count == 0:
        return insert
    steps = [f"step0 AS ({insert} RETURNING 1)"]
    steps += [f"step{n} AS ({_spend_sql(f'step{n - 1}')} RETURNING 1)" for n in range(1, budget_count)]
    return f"WITH {', '.join(steps)} {_spend_sql(f'step{budget_count - 1}')}"
