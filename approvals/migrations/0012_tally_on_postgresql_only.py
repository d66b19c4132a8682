"""Tally the calls on PostgreSQL only: SQLite counts them (approvals.tally's portable twin).

SQLite's row triggers of migration 0011 kept a tally nothing reads any more: they are
dropped with their rows. Going back installs them again over a fresh count.
"""

import importlib

from django.db import migrations

TALLY = importlib.import_module("approvals.migrations.0011_call_tally")


def drop_sqlite_tally(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "sqlite":
        return
    for statement in TALLY.SQLITE_DROP:
        schema_editor.execute(statement, params=None)
    apps.get_model("approvals", "CallTally").objects.all().delete()


def restore_sqlite_tally(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "sqlite":
        TALLY.install(apps, schema_editor)


class Migration(migrations.Migration):
    dependencies = [("approvals", "0011_call_tally")]

    operations = [migrations.RunPython(drop_sqlite_tally, restore_sqlite_tally)]
