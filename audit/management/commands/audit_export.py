"""`python manage.py audit_export --out FILE.jsonl`: the audit log, one event per line, enough to recompute every hash.

Each line is the canonical JSON (audit/canonical.py, RFC 8785) of one sealed event's
hashed fields (audit.models.HASHED_FIELDS: seq, created_at, actor_kind, actor_name,
action, call_id, agent_name, tool_name, data) plus its prev_hash and hash, in seq
order, and its digest when it has one (the sealed form). audit/hashing.py gives both
forms of the hash; the first event's prev_hash is 64 zeros. Events still waiting to
be sealed are not in the chain yet, so not in the export. docs/audit.md documents the
forms and docs/verify_export.py checks an export (and a signed checkpoint) with
nothing of Gatehouse.
"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandParser

from audit.canonical import canonical_json
from audit.models import Event
from audit.typealiases import JSONObject, OptionValue


def export_line(event: Event) -> str:
    """Return an event's line of the export: its hashed fields, prev_hash, hash (and digest), in canonical JSON."""
    fields: JSONObject = {**event.hashed_fields(), "prev_hash": event.prev_hash, "hash": event.hash}
    if event.digest is not None:
        fields["digest"] = event.digest
    return canonical_json(fields)


class Command(BaseCommand):
    help = "Write the audit log to FILE.jsonl (one canonical JSON event per line, in seq order)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--out", required=True, help="The file to write (replaced if it exists).")

    def handle(self, *args: str, **options: OptionValue) -> None:
        path = Path(options["out"])
        path.parent.mkdir(parents=True, exist_ok=True)
        count = 0
        with path.open("w", encoding="utf-8") as handle:
            for event in Event.objects.filter(seq__isnull=False).order_by("seq").iterator(chunk_size=5000):
                handle.write(export_line(event) + "\n")
                count += 1
        self.stdout.write(self.style.SUCCESS(f"exported {count} events to {path}"))
