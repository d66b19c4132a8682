"""The bench tests' own fixtures (the product's suite has its own: nothing is imported across)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection


def _truncate_guard(*, enabled: bool) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE audit_event {'ENABLE' if enabled else 'DISABLE'} TRIGGER audit_event_no_truncate")


@pytest.fixture
def committed_events(transactional_db: None) -> Iterator[None]:
    """Commit what the test writes (a child process reads it), and let the teardown's TRUNCATE empty the audit table.

    The append-only table refuses TRUNCATE, as it must in production; only this
    teardown switches that one guard off, and the next such test switches it on.
    """
    _truncate_guard(enabled=True)
    yield
    _truncate_guard(enabled=False)
