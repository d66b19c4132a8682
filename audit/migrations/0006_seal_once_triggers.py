"""PostgreSQL triggers that let the sequencer seal an event once, and nothing else change it.

INSERT: an event arrives unsealed (seq, prev_hash, hash and sealed_at NULL) and with
the digest of its content. UPDATE: only sealing an unsealed event, which sets the four
sealing columns and leaves every other column as it was. DELETE and TRUNCATE raise,
as before. (A database superuser can still disable triggers; the hash chain and signed
checkpoints catch what that would allow.)
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION audit_event_is_append_only() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.seq IS NULL
       AND NEW.seq IS NOT NULL AND NEW.prev_hash IS NOT NULL AND NEW.hash IS NOT NULL AND NEW.sealed_at IS NOT NULL
       AND (NEW.id, NEW.created_at, NEW.actor_kind, NEW.actor_name, NEW.action, NEW.call_id, NEW.agent_name,
            NEW.tool_name, NEW.data, NEW.digest)
           IS NOT DISTINCT FROM
           (OLD.id, OLD.created_at, OLD.actor_kind, OLD.actor_name, OLD.action, OLD.call_id, OLD.agent_name,
            OLD.tool_name, OLD.data, OLD.digest) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'audit_event is append-only: % refused (only sealing an unsealed event may update it)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;

CREATE OR REPLACE FUNCTION audit_event_arrives_unsealed() RETURNS trigger AS $$
BEGIN
    IF NEW.seq IS NOT NULL OR NEW.prev_hash IS NOT NULL OR NEW.hash IS NOT NULL OR NEW.sealed_at IS NOT NULL
       OR NEW.digest IS NULL THEN
        RAISE EXCEPTION 'audit_event is append-only: an event is inserted unsealed, with its digest '
                        '(the sequencer alone sets seq, prev_hash, hash and sealed_at)'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER audit_event_inserted_unsealed
    BEFORE INSERT ON audit_event
    FOR EACH ROW EXECUTE FUNCTION audit_event_arrives_unsealed();
"""

# Back to 0002's function: every UPDATE refused.
DROP = """
DROP TRIGGER IF EXISTS audit_event_inserted_unsealed ON audit_event;
DROP FUNCTION IF EXISTS audit_event_arrives_unsealed();
CREATE OR REPLACE FUNCTION audit_event_is_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'audit_event is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
"""


def _on_postgresql(sql: str):
    def run(apps, schema_editor) -> None:
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql, params=None)

    return run


class Migration(migrations.Migration):
    dependencies = [("audit", "0005_sealed_by_the_sequencer")]

    operations = [migrations.RunPython(_on_postgresql(CREATE), _on_postgresql(DROP))]
