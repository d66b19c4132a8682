"""Statements on the execution path, built once per process from the models' metadata.

An auto-approved call crosses a handful of single-row statements: the worker loads
the call with its tool and agent, and each step is a compare-and-set `UPDATE`. The
ORM would compile each of them anew for every call the worker runs. These functions
build each statement's text once and bind values prepared exactly as the ORM
prepares them (`get_db_prep_save`), so what is stored is the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

from django.db import connection, models

from agents.models import Agent, column_list, instance_from_row
from toolcatalog.models import Tool

if TYPE_CHECKING:
    from approvals.models import ToolCall


@cache
def _insert_sql(model: type[models.Model]) -> str:
    placeholders = ", ".join(["%s"] * len(model._meta.concrete_fields))
    table = connection.ops.quote_name(model._meta.db_table)
    return f"INSERT INTO {table} ({column_list(model)}) VALUES ({placeholders})"  # noqa: S608 — names from _meta


def insert_statement(instance: models.Model) -> tuple[str, list[Any]]:
    """Return the INSERT of a new `instance` and its values, prepared as `save()` prepares them."""
    fields = instance._meta.concrete_fields
    values = [field.get_db_prep_save(field.pre_save(instance, True), connection) for field in fields]
    return _insert_sql(type(instance)), values


@cache
def with_tool_and_agent_columns(model: type[models.Model]) -> str:
    """Return the columns of a call (alias c), its tool (t) and its agent (a), as `call_from_row` takes them."""
    return f"{column_list(model, 'c')}, {column_list(Tool, 't')}, {column_list(Agent, 'a')}"


@cache
def _with_tool_and_agent_sql(model: type[models.Model]) -> str:
    table = connection.ops.quote_name(model._meta.db_table)
    return (
        f"SELECT {with_tool_and_agent_columns(model)} "  # noqa: S608 — names from _meta
        f"FROM {table} c "
        f"JOIN {connection.ops.quote_name(Tool._meta.db_table)} t ON t.id = c.tool_id "
        f"JOIN {connection.ops.quote_name(Agent._meta.db_table)} a ON a.id = c.agent_id "
        "WHERE c.id = %s"
    )


def with_tool_and_agent(model: type[ToolCall], pk: Any) -> ToolCall | None:
    """Return the call `pk` with its tool and agent loaded (`select_related`), or None."""
    if connection.vendor != "postgresql":  # raw rows are not converted there: the ORM does it
        return model.objects.select_related("tool", "agent").filter(pk=pk).first()
    with connection.cursor() as cursor:
        cursor.execute(_with_tool_and_agent_sql(model), [model._meta.pk.get_db_prep_value(pk, connection)])
        row = cursor.fetchone()
    return None if row is None else call_from_row(model, row)


def call_from_row(model: type[ToolCall], row: Sequence[Any]) -> ToolCall:
    """Build a call with its tool and agent from a row of `with_tool_and_agent_columns`."""
    sizes = [len(m._meta.concrete_fields) for m in (model, Tool)]
    call = instance_from_row(model, row[: sizes[0]])
    call.tool = instance_from_row(Tool, row[sizes[0] : sum(sizes)])
    call.agent = instance_from_row(Agent, row[sum(sizes) :])
    return call


@cache
def _compare_and_set_sql(model: type[models.Model], where: tuple[str, ...], changes: tuple[str, ...]) -> str:
    quote = connection.ops.quote_name
    fields = {name: model._meta.get_field(name) for name in (*where, *changes)}
    assignments = ", ".join(f"{quote(fields[name].column)} = %s" for name in changes)
    conditions = " AND ".join(f"{quote(fields[name].column)} = %s" for name in where)
    table, pk = quote(model._meta.db_table), quote(model._meta.pk.column)
    return f"UPDATE {table} SET {assignments} WHERE {pk} = %s AND {conditions}"  # noqa: S608


def compare_and_set(instance: models.Model, where: dict[str, Any], changes: dict[str, Any]) -> bool:
    """`UPDATE … SET changes WHERE pk AND every where-field equals its value`; return whether a row changed."""
    with connection.cursor() as cursor:
        cursor.execute(*compare_and_set_statement(instance, where, changes))
        return cursor.rowcount == 1


def compare_and_set_statement(
    instance: models.Model, where: dict[str, Any], changes: dict[str, Any]
) -> tuple[str, list[Any]]:
    """Return the statement of `compare_and_set` and its values (for `audit.chain.record_if_changed`)."""
    model = type(instance)
    sql = _compare_and_set_sql(model, tuple(where), tuple(changes))
    get_field = model._meta.get_field
    params = [get_field(name).get_db_prep_save(value, connection) for name, value in changes.items()]
    params.append(model._meta.pk.get_db_prep_value(instance.pk, connection))
    params.extend(get_field(name).get_db_prep_value(value, connection) for name, value in where.items())
    return sql, params


@cache
def _claim_sql(model: type[models.Model], changes: tuple[str, ...]) -> str:
    quote = connection.ops.quote_name
    assignments = ", ".join(f"{quote(model._meta.get_field(name).column)} = %s" for name in changes)
    return (
        f"UPDATE {quote(model._meta.db_table)} c SET {assignments} "  # noqa: S608 — names from _meta
        f"FROM {quote(Tool._meta.db_table)} t, {quote(Agent._meta.db_table)} a "
        "WHERE c.id = %s AND c.status = %s AND c.attempts = %s "
        "AND t.id = c.tool_id AND a.id = c.agent_id AND t.name = %s AND a.name = %s"
    )


def claim_statement(
    model: type[ToolCall], pk: Any, seen: tuple[str, int, str, str], changes: dict[str, Any]
) -> tuple[str, list[Any]]:
    """Return an UPDATE of the call `pk` to `changes` if its (status, attempts, tool name, agent name) are `seen`.

    The sender of an execution message saw the call so; if it still is, the claim
    needs nothing read first (RETURNING `with_tool_and_agent_columns` loads it).
    """
    get_field = model._meta.get_field
    params = [get_field(name).get_db_prep_save(value, connection) for name, value in changes.items()]
    params.extend([model._meta.pk.get_db_prep_value(pk, connection), *seen])
    return _claim_sql(model, tuple(changes)), params


@cache
def _status_sql(model: type[models.Model]) -> str:
    quote = connection.ops.quote_name
    return f"SELECT {quote('status')} FROM {quote(model._meta.db_table)} WHERE {quote(model._meta.pk.column)} = %s"  # noqa: S608


def status_of(model: type[ToolCall], pk: Any) -> str | None:
    """Return the call's current status (one column, no model built), or None if it is gone."""
    with connection.cursor() as cursor:
        cursor.execute(_status_sql(model), [model._meta.pk.get_db_prep_value(pk, connection)])
        row = cursor.fetchone()
    return None if row is None else row[0]
