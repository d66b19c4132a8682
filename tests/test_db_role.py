"""The application's database role may append to and read the audit log, and nothing more (`db_roles`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import timedelta
from io import StringIO

import psycopg
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone

from approvals.lifecycle import expire
from approvals.models import ToolCall
from audit.models import Event
from audit.sequencer import seal_all
from tests.app_role import AppRole
from tests.conftest import AgentApi, refund

pytestmark = pytest.mark.django_db

APPENDED = "test.appended"  # inserted unsealed, as every event is: the sequencer gives its seq and hashes
INSERT_EVENT = (
    "INSERT INTO audit_event (created_at, actor_kind, actor_name, action, call_id, agent_name, tool_name,"
    " data, digest) VALUES (now(), 'system', 'test', %s, NULL, '', '', '{}', %s)"
)
# Each refused by PostgreSQL's privileges, not by the audit table's triggers (which would say "append-only").
REFUSED = [
    ("ALTER TABLE audit_event DISABLE TRIGGER audit_event_no_update_delete", "must be owner of table audit_event"),
    ("ALTER TABLE audit_event DISABLE TRIGGER ALL", "must be owner of table audit_event"),
    ("DROP TRIGGER audit_event_no_truncate ON audit_event", "must be owner of relation audit_event"),
    (
        "CREATE OR REPLACE FUNCTION audit_event_is_append_only() RETURNS trigger AS $$ BEGIN RETURN NEW; END $$"
        " LANGUAGE plpgsql",
        "permission denied for schema public",
    ),
    ("ALTER TABLE audit_event OWNER TO CURRENT_USER", "must be owner of table audit_event"),
    ("SET session_replication_role = replica", 'permission denied to set parameter "session_replication_role"'),
    ("UPDATE audit_event SET action = 'x' WHERE action = 'test.appended'", "permission denied for table audit_event"),
    ("UPDATE audit_event SET digest = 'x' WHERE action = 'test.appended'", "permission denied for table audit_event"),
    ("DELETE FROM audit_event WHERE action = 'test.appended'", "permission denied for table audit_event"),
    ("TRUNCATE audit_event", "permission denied for table audit_event"),
]


@pytest.fixture
def logged_in_as_app_role(app_role: AppRole) -> Iterator[psycopg.Connection]:
    """A connection that logs in as the app role (not SET ROLE), with one event appended in its open transaction."""
    settings = connection.settings_dict
    with psycopg.connect(
        dbname=settings["NAME"],
        host=settings["HOST"] or None,
        port=settings["PORT"] or None,
        user=app_role.name,
        password=app_role.password,
    ) as app:
        app.execute(INSERT_EVENT, [APPENDED, "f" * 64])
        yield app
        app.rollback()  # leave nothing behind: the test database's audit table is append-only too


def test_the_app_role_appends_and_reads_audit_events(logged_in_as_app_role: psycopg.Connection) -> None:
    rows = logged_in_as_app_role.execute("SELECT action, current_user FROM audit_event WHERE action = %s", [APPENDED])

    assert rows.fetchall() == [("test.appended", connection.settings_dict["NAME"] + "_app")]


@pytest.mark.parametrize(("statement", "refusal"), REFUSED)
def test_the_app_role_may_not_alter_the_audit_table_or_its_triggers_or_change_its_rows(
    logged_in_as_app_role: psycopg.Connection, statement: str, refusal: str
) -> None:
    app = logged_in_as_app_role

    with pytest.raises(psycopg.errors.InsufficientPrivilege, match=re.escape(refusal)), app.transaction():
        app.execute(statement)  # in a savepoint: the transaction goes on

    assert app.execute("SELECT count(*) FROM audit_event WHERE action = %s", [APPENDED]).fetchone() == (1,)
    assert app.execute("SELECT current_setting('session_replication_role')").fetchone() == ("origin",)


def test_the_app_role_may_not_become_the_owner(logged_in_as_app_role: psycopg.Connection) -> None:
    owner = logged_in_as_app_role.execute("SELECT tableowner FROM pg_tables WHERE tablename = 'audit_event'")

    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        logged_in_as_app_role.execute(f'SET ROLE "{owner.fetchone()[0]}"')


@pytest.mark.django_db(transaction=True)
def test_the_products_audited_writes_and_audit_verify_work_as_the_app_role(
    as_app_role: AppRole, agent_api: Callable[..., AgentApi]
) -> None:
    """The product's one write path: a change and its events in one transaction (`audit.chain.record`).

    A proposal (budgets, the row, its event) and a compare-and-set (`lifecycle.change`,
    through `expire`) that wins and then loses, everything as the app role.
    """
    response = agent_api().propose(refund(30000, idempotency_key="k-role"))
    assert response.status_code == 202, response.content
    call = ToolCall.objects.select_related("agent", "tool").get(pk=response.json()["id"])
    ToolCall.objects.filter(pk=call.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    call.refresh_from_db()

    assert expire(call) is True
    assert expire(call) is False  # the row is no longer pending: nothing written
    assert seal_all() >= 2  # the sequencer's UPDATE of the sealing columns, as the app role too
    call_command("audit_verify", stdout=StringIO())

    assert list(Event.objects.filter(call_id=call.pk).order_by("seq").values_list("action", flat=True)) == [
        "call.proposed",
        "call.expired",
    ]


def test_check_accepts_the_app_role_and_refuses_a_superuser(as_app_role: AppRole) -> None:
    out = StringIO()
    call_command("db_roles", check=True, stdout=out)
    assert f"role {as_app_role.name} may only append to and read the audit log" in out.getvalue()

    with connection.cursor() as cursor:
        cursor.execute("RESET ROLE")
    with pytest.raises(CommandError, match="could alter or erase the audit log: is a superuser, owns the table"):
        call_command("db_roles", check=True)


def test_print_sql_shows_the_grants_and_changes_nothing() -> None:
    out = StringIO()
    call_command("db_roles", app_role="gatehouse_app_printed", print_sql=True, stdout=out)

    sql = out.getvalue()
    assert 'REVOKE ALL ON TABLE "public"."audit_event" FROM "gatehouse_app_printed";' in sql
    assert 'GRANT SELECT, INSERT ON TABLE "public"."audit_event" TO "gatehouse_app_printed";' in sql
    assert 'GRANT UPDATE (seq, prev_hash, hash, sealed_at) ON TABLE "public"."audit_event"' in sql
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_roles WHERE rolname = 'gatehouse_app_printed'")
        assert cursor.fetchone() == (0,)


def test_the_owner_cannot_be_made_the_app_role() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableowner FROM pg_tables WHERE tablename = 'audit_event'")
        owner = cursor.fetchone()[0]

    with pytest.raises(CommandError, match=f"{owner} owns audit_event"):
        call_command("db_roles", app_role=owner)
