"""Index the calls' arguments for containment, so a call's page finds the other calls on its resource.

The page asks for the latest calls whose resource argument (a refund's pedido_id, an
order lookup's order_id: each tool names its own) has this call's value. No btree can
serve every tool's argument; a GIN index of the arguments (jsonb_path_ops: containment
only, the smallest GIN) serves them all. Without it PostgreSQL walks the calls newest
first until it has found ten, which is every call when a resource has fewer.

Built CONCURRENTLY (so outside a transaction): proposals keep being written meanwhile.
PostgreSQL only: SQLite has no GIN and an embedded installation has no such backlog.
"""

from django.db import migrations

CREATE = (
    "CREATE INDEX CONCURRENTLY IF NOT EXISTS toolcall_arguments_contain "
    "ON approvals_toolcall USING gin (arguments jsonb_path_ops)"
)
DROP = "DROP INDEX CONCURRENTLY IF EXISTS toolcall_arguments_contain"


def _on_postgresql(sql: str):
    def run(apps, schema_editor) -> None:
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql, params=None)

    return run


class Migration(migrations.Migration):
    atomic = False
    dependencies = [("approvals", "0009_overview_reads_review_outcomes_only")]

    operations = [migrations.RunPython(_on_postgresql(CREATE), _on_postgresql(DROP))]
