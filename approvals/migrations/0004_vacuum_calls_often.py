"""Ask autovacuum to clean the calls table after 1% of it changed, not PostgreSQL's default 20%.

Every executed call is updated twice (approved → executing → succeeded), and each
update leaves a dead row version and index entries pointing at it. The worker's
claim inserts into the same corner of the queue index each time: with a few
thousand dead versions there (after a burst of executions) each claim cost ~6 ms
more until the table was vacuumed (docs/benchmarks.md, 18). At the default scale
factor a table of 100,000 calls waits for 20,000 dead versions.
"""

from django.db import migrations

SETTINGS = "autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 500"


def vacuum_often(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE approvals_toolcall SET ({SETTINGS})")


def vacuum_as_default(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            "ALTER TABLE approvals_toolcall RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold)"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0003_fewer_indexes"),
    ]

    operations = [
        migrations.RunPython(vacuum_often, vacuum_as_default),
    ]
