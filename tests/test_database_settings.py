"""Settings the database itself carries (set by migrations)."""

from __future__ import annotations

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db


def test_autovacuum_cleans_the_calls_table_after_one_percent_changed() -> None:
    assert connection.vendor == "postgresql"  # the suite runs on PostgreSQL; elsewhere this is a failure
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'approvals_toolcall'")
        options = cursor.fetchone()[0]
    assert "autovacuum_vacuum_scale_factor=0.01" in options
    assert "autovacuum_vacuum_threshold=500" in options
