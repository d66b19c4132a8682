"""Create or check the least-privilege PostgreSQL role the application connects as.

The role that runs `migrate` owns the tables; the application's role may read and
write the product's tables, may only INSERT and SELECT the audit log and UPDATE its
sealing columns (the sequencer's, which the triggers let it set once), and owns
nothing, so it cannot ALTER the audit table, disable or replace its triggers, or
UPDATE any other column, DELETE or TRUNCATE its rows. See docs/deploy.md.
"""

from __future__ import annotations

import re

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction

from audit.models import Event
from audit.store import SEALING_COLUMNS
from audit.typealiases import OptionValue

# Role names are interpolated into SQL (utility statements take no parameters): only plain names.
_ROLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
DEFAULT_APP_ROLE = "gatehouse_app"


def quote_ident(name: str) -> str:
    """Return `name` as a quoted PostgreSQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def app_role_sql(app_role: str, *, owner: str, database: str, schema: str, audit_table: str) -> list[str]:
    """Return the statements that make `app_role` a login role with exactly the application's privileges.

    Idempotent: every privilege is revoked first, then granted again, so running it
    after new migrations (or over an older grant) leaves exactly this. Tables that
    `owner` creates later get the ordinary grants by default; the audit table is not
    re-created by migrations, so its narrower grant holds.
    """
    role, owner_q, schema_q, audit = (quote_ident(n) for n in (app_role, owner, schema, audit_table))
    return [
        f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{app_role}') "
        f"THEN CREATE ROLE {role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS; END IF; END $$",
        f"GRANT CONNECT ON DATABASE {quote_ident(database)} TO {role}",
        f"GRANT USAGE ON SCHEMA {schema_q} TO {role}",
        f"REVOKE ALL ON ALL TABLES IN SCHEMA {schema_q} FROM {role}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema_q} TO {role}",
        # The audit log is append-only for the application: add and read, and seal (the sequencer), nothing else.
        f"REVOKE ALL ON TABLE {schema_q}.{audit} FROM {role}",
        f"GRANT SELECT, INSERT ON TABLE {schema_q}.{audit} TO {role}",
        f"GRANT UPDATE ({', '.join(SEALING_COLUMNS)}) ON TABLE {schema_q}.{audit} TO {role}",
        f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {schema_q} TO {role}",
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {owner_q} IN SCHEMA {schema_q} "
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {role}",
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {owner_q} IN SCHEMA {schema_q} GRANT USAGE, SELECT ON SEQUENCES TO {role}",
    ]


# An existing app role's standing: a member of the table's owner, or holding a power no app needs.
_ROLE_POWERS_SQL = """
SELECT pg_has_role(rolname, %s, 'MEMBER'), rolsuper, rolcreaterole, rolreplication, rolbypassrls
FROM pg_roles WHERE rolname = %s
"""

# What the connected role may do to the audit table that only its owner (or a superuser) should.
_POWERS_SQL = """
SELECT r.rolsuper, pg_has_role(current_user, t.tableowner, 'MEMBER'),
       has_table_privilege(t.schemaname || '.' || t.tablename, 'UPDATE'),
       has_table_privilege(t.schemaname || '.' || t.tablename, 'DELETE'),
       has_table_privilege(t.schemaname || '.' || t.tablename, 'TRUNCATE'),
       has_table_privilege(t.schemaname || '.' || t.tablename, 'TRIGGER'),
       EXISTS(SELECT 1 FROM pg_attribute a
              WHERE a.attrelid = (quote_ident(t.schemaname) || '.' || quote_ident(t.tablename))::regclass
                AND a.attnum > 0 AND NOT a.attisdropped AND a.attname <> ALL(%s)
                AND has_column_privilege(a.attrelid, a.attnum, 'UPDATE'))
FROM pg_roles r, pg_tables t
WHERE r.rolname = current_user AND t.schemaname = current_schema() AND t.tablename = %s
"""
_POWER_NAMES = (
    "is a superuser",
    "owns the table (or is a member of its owner)",
    "UPDATE",
    "DELETE",
    "TRUNCATE",
    "TRIGGER",
    "UPDATE of a column but the sealing ones",
)


class Command(BaseCommand):
    help = (
        "Create the application's least-privilege database role (run as the role that runs migrate, or a "
        "superuser), print its SQL (--print-sql), or check the connected role (--check)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--app-role", default=DEFAULT_APP_ROLE, help=f"default: {DEFAULT_APP_ROLE}")
        parser.add_argument("--print-sql", action="store_true", help="Print the statements instead of running them.")
        parser.add_argument(
            "--check",
            action="store_true",
            help="Exit non-zero if the role this connection uses could alter or erase the audit log.",
        )

    def handle(self, *args: str, **options: OptionValue) -> None:
        if connection.vendor != "postgresql":
            raise CommandError("database roles are a PostgreSQL matter; this database is " + connection.vendor)
        if options["check"]:
            self.check_connected_role()
            return
        app_role = options["app_role"]
        if not _ROLE_NAME.fullmatch(app_role):
            raise CommandError(f"{app_role!r} is not a plain role name (letters, digits, _)")
        statements = app_role_sql(app_role, **self.database_facts(app_role))
        if options["print_sql"]:
            self.stdout.write(";\n".join(statements) + ";")
            return
        with transaction.atomic(), connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)
        self.stdout.write(
            self.style.SUCCESS(
                f"role {app_role} may read and write the tables, and only append to and seal "
                f"{Event._meta.db_table}: connect the application as it"
            )
        )

    def database_facts(self, app_role: str) -> dict[str, str]:
        """Return the audit table's owner, the database and the schema; refuse an app role that owns it."""
        table = Event._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT tableowner, current_database(), current_schema() FROM pg_tables "
                "WHERE schemaname = current_schema() AND tablename = %s",
                [table],
            )
            row = cursor.fetchone()
            if row is None:
                raise CommandError(f"no table {table} here: run migrate (as the owner role) first")
            owner, database, schema = row
            cursor.execute(_ROLE_POWERS_SQL, [owner, app_role])
            powers = cursor.fetchone()
            cursor.execute("SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user")
            may_create_roles = cursor.fetchone()[0]
        if app_role == owner or (powers and powers[0]):
            raise CommandError(f"{app_role} owns {table} (or is a member of its owner {owner}): use another role")
        if powers and any(powers[1:]):
            raise CommandError(
                f"role {app_role} exists with powers the app must not have (superuser, createrole, replication or "
                f"bypassrls): ALTER ROLE {app_role} NOSUPERUSER NOCREATEROLE NOREPLICATION NOBYPASSRLS, or use another"
            )
        if powers is None and not may_create_roles:
            raise CommandError(
                f"role {app_role} does not exist and this role may not create it: run this once as a superuser, "
                f"or CREATE ROLE {app_role} LOGIN first"
            )
        return {"owner": owner, "database": database, "schema": schema, "audit_table": table}

    def check_connected_role(self) -> None:
        """Refuse (non-zero exit) if the connected role may change the audit log by any means but INSERT."""
        with connection.cursor() as cursor:
            cursor.execute(_POWERS_SQL, [list(SEALING_COLUMNS), Event._meta.db_table])
            row = cursor.fetchone()
            cursor.execute("SELECT current_user")
            user = cursor.fetchone()[0]
        if row is None:
            raise CommandError(f"no table {Event._meta.db_table} here: run migrate first")
        powers = [name for name, held in zip(_POWER_NAMES, row, strict=True) if held]
        if powers:
            raise CommandError(f"role {user} could alter or erase the audit log: " + ", ".join(powers))
        self.stdout.write(
            self.style.SUCCESS(f"role {user} may only append to and read the audit log, and seal its events once")
        )
