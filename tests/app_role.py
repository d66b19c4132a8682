"""The application's least-privilege database role (`manage.py db_roles`), in the test database.

Roles belong to the whole PostgreSQL server, so the role is named after the test
database (sessions running side by side each get their own) and dropped at the end.
Tests that request `as_app_role` run their SQL with exactly its privileges
(SET ROLE on the test connection); conftest's `as_database_owner` steps out for what
only the owner may do (toggling the audit table's triggers, tampering as an attacker would).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from psycopg import sql


@dataclass(frozen=True)
class AppRole:
    name: str
    password: str


@pytest.fixture(scope="session")
def app_role(django_db_setup: None, django_db_blocker: Any) -> Iterator[AppRole]:
    """Create the app role for the test database with `db_roles`, give it a password; drop it after the session."""
    with django_db_blocker.unblock():
        role = AppRole(f"{connection.settings_dict['NAME']}_app", secrets.token_urlsafe(16))
        call_command("db_roles", app_role=role.name, stdout=StringIO())
        _execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(role.name), sql.Literal(role.password)))
        yield role
        _execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role.name)))
        _execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role.name)))


def _execute(statement: sql.Composable) -> None:
    # Utility statements take no bound parameters: compose them client-side, quoted by psycopg.
    with connection.cursor() as cursor:
        cursor.execute(statement.as_string(connection.connection))


@pytest.fixture
def as_app_role(app_role: AppRole) -> Iterator[AppRole]:
    """Run the test's SQL on the test connection with the app role's privileges and no more."""
    _execute(sql.SQL("SET ROLE {}").format(sql.Identifier(app_role.name)))
    yield app_role
    # Inside a test's transaction the rollback undoes the SET ROLE; a transactional test's must be undone here.
    if not connection.in_atomic_block:
        _execute(sql.SQL("RESET ROLE"))
