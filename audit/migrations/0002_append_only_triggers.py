"""PostgreSQL triggers that make the audit table append-only.

UPDATE, DELETE and TRUNCATE raise. (A database superuser can still disable
triggers; the hash chain and signed checkpoints catch what that would allow.)
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION audit_event_is_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'audit_event is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER audit_event_no_update_delete
    BEFORE UPDATE OR DELETE ON audit_event
    FOR EACH ROW EXECUTE FUNCTION audit_event_is_append_only();

CREATE TRIGGER audit_event_no_truncate
    BEFORE TRUNCATE ON audit_event
    FOR EACH STATEMENT EXECUTE FUNCTION audit_event_is_append_only();
"""

DROP = """
DROP TRIGGER IF EXISTS audit_event_no_update_delete ON audit_event;
DROP TRIGGER IF EXISTS audit_event_no_truncate ON audit_event;
DROP FUNCTION IF EXISTS audit_event_is_append_only();
"""


def _on_postgresql(sql: str):
    def run(apps, schema_editor) -> None:
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql, params=None)

    return run


class Migration(migrations.Migration):
    dependencies = [("audit", "0001_initial")]

    operations = [migrations.RunPython(_on_postgresql(CREATE), _on_postgresql(DROP))]
