"""Tally the calls by the day they were proposed, their status and tier, from triggers, for the overview.

Counting a million pending calls, or every call of the last 30 days, takes the overview
past its time; summing a few rows per day does not. The triggers fire for every
statement that inserts, deletes or moves calls (the ORM's, the store's own SQL, an
operator's), so the tally cannot drift from the table: each appends −1 for the
(day, status, tier) a call left and +1 for the one it entered, and writers never update a
shared row. The existing calls are tallied in the same transaction as the triggers.

PostgreSQL tallies per statement, from its transition tables (a bulk load is one INSERT
into the tally); SQLite, which has none, per row.
"""

from django.db import migrations, models
from django.db.models import Count
from django.db.models.functions import TruncDate

POSTGRESQL = """
CREATE FUNCTION approvals_tally_calls() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO approvals_calltally (day, status, risk_tier, calls)
        SELECT (created_at AT TIME ZONE 'UTC')::date, status, risk_tier, count(*) FROM new_calls GROUP BY 1, 2, 3;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO approvals_calltally (day, status, risk_tier, calls)
        SELECT (created_at AT TIME ZONE 'UTC')::date, status, risk_tier, -count(*) FROM old_calls GROUP BY 1, 2, 3;
    ELSE
        INSERT INTO approvals_calltally (day, status, risk_tier, calls)
        SELECT day, status, risk_tier, sum(calls) FROM (
            SELECT (o.created_at AT TIME ZONE 'UTC')::date AS day, o.status, o.risk_tier, -1 AS calls
            FROM old_calls o JOIN new_calls n USING (id)
            WHERE o.status <> n.status OR o.created_at <> n.created_at OR o.risk_tier IS DISTINCT FROM n.risk_tier
            UNION ALL
            SELECT (n.created_at AT TIME ZONE 'UTC')::date, n.status, n.risk_tier, 1
            FROM old_calls o JOIN new_calls n USING (id)
            WHERE o.status <> n.status OR o.created_at <> n.created_at OR o.risk_tier IS DISTINCT FROM n.risk_tier
        ) AS moved GROUP BY day, status, risk_tier HAVING sum(calls) <> 0;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER approvals_toolcall_tally_insert AFTER INSERT ON approvals_toolcall
    REFERENCING NEW TABLE AS new_calls FOR EACH STATEMENT EXECUTE FUNCTION approvals_tally_calls();
CREATE TRIGGER approvals_toolcall_tally_update AFTER UPDATE ON approvals_toolcall
    REFERENCING OLD TABLE AS old_calls NEW TABLE AS new_calls FOR EACH STATEMENT EXECUTE FUNCTION approvals_tally_calls();
CREATE TRIGGER approvals_toolcall_tally_delete AFTER DELETE ON approvals_toolcall
    REFERENCING OLD TABLE AS old_calls FOR EACH STATEMENT EXECUTE FUNCTION approvals_tally_calls();
"""
POSTGRESQL_DROP = """
DROP TRIGGER approvals_toolcall_tally_insert ON approvals_toolcall;
DROP TRIGGER approvals_toolcall_tally_update ON approvals_toolcall;
DROP TRIGGER approvals_toolcall_tally_delete ON approvals_toolcall;
DROP FUNCTION approvals_tally_calls();
"""
SQLITE = [
    """CREATE TRIGGER approvals_toolcall_tally_insert AFTER INSERT ON approvals_toolcall BEGIN
        INSERT INTO approvals_calltally (day, status, risk_tier, calls)
        VALUES (date(NEW.created_at), NEW.status, NEW.risk_tier, 1);
    END""",
    """CREATE TRIGGER approvals_toolcall_tally_update AFTER UPDATE OF status, created_at, risk_tier ON approvals_toolcall
    WHEN OLD.status <> NEW.status OR OLD.created_at <> NEW.created_at OR OLD.risk_tier IS NOT NEW.risk_tier BEGIN
        INSERT INTO approvals_calltally (day, status, risk_tier, calls)
        VALUES (date(OLD.created_at), OLD.status, OLD.risk_tier, -1);
        INSERT INTO approvals_calltally (day, status, risk_tier, calls)
        VALUES (date(NEW.created_at), NEW.status, NEW.risk_tier, 1);
    END""",
    """CREATE TRIGGER approvals_toolcall_tally_delete AFTER DELETE ON approvals_toolcall BEGIN
        INSERT INTO approvals_calltally (day, status, risk_tier, calls)
        VALUES (date(OLD.created_at), OLD.status, OLD.risk_tier, -1);
    END""",
]
SQLITE_DROP = [f"DROP TRIGGER approvals_toolcall_tally_{event}" for event in ("insert", "update", "delete")]


def install(apps, schema_editor) -> None:
    """Tally the calls there are, then keep tallying them (one transaction: nothing counted twice or missed)."""
    ToolCall, CallTally = apps.get_model("approvals", "ToolCall"), apps.get_model("approvals", "CallTally")
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("LOCK TABLE approvals_toolcall IN SHARE MODE")  # no call moves while it is counted
    tallied = (
        ToolCall.objects.annotate(day=TruncDate("created_at"))
        .values("day", "status", "risk_tier")
        .annotate(calls=Count("id"))
    )
    CallTally.objects.bulk_create(CallTally(**row) for row in tallied.order_by())
    for statement in [POSTGRESQL] if schema_editor.connection.vendor == "postgresql" else SQLITE:
        schema_editor.execute(statement, params=None)


def uninstall(apps, schema_editor) -> None:
    for statement in [POSTGRESQL_DROP] if schema_editor.connection.vendor == "postgresql" else SQLITE_DROP:
        schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [("approvals", "0010_call_page_finds_a_resources_calls_by_index")]

    operations = [
        migrations.CreateModel(
            name="CallTally",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("day", models.DateField()),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("refused", "Refused"),
                            ("pending_approval", "Pending approval"),
                            ("rejected", "Rejected"),
                            ("expired", "Expired"),
                            ("approved", "Approved"),
                            ("executing", "Executing"),
                            ("succeeded", "Succeeded"),
                            ("needs_reconciliation", "Needs reconciliation"),
                            ("failed", "Failed"),
                        ],
                        max_length=24,
                    ),
                ),
                ("risk_tier", models.SmallIntegerField(null=True)),
                ("calls", models.BigIntegerField()),
            ],
            options={"indexes": [models.Index(fields=["day", "status"], name="calltally_day_status")]},
        ),
        migrations.AddIndex(
            model_name="toolcall",
            index=models.Index(
                condition=models.Q(("status", "pending_approval")), fields=["expires_at"], name="toolcall_pending_expiry"
            ),
        ),
        migrations.RunPython(install, uninstall),
    ]
