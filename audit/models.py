"""The tamper-evident audit log: an append-only hash chain of events.

This app is a leaf: it imports no other Gatehouse app. Calls and agents are
referenced by value (id, name) so an event outlives whatever it describes.

An event is inserted unsealed, in the transaction of the change it describes, with
the digest of its content; the sequencer (audit/sequencer.py) later gives it its
place in the chain: `seq`, `prev_hash`, `hash` and `sealed_at`, set once.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from django.db import models

# The fields an event's hash covers, in the order `Event.fields_to_hash` takes them; its digest covers all but seq.
HASHED_FIELDS = (
    "seq",
    "created_at",
    "actor_kind",
    "actor_name",
    "action",
    "call_id",
    "agent_name",
    "tool_name",
    "data",
)


class ActorKind(models.TextChoices):
    AGENT = "agent", "Agent"
    REVIEWER = "reviewer", "Reviewer"
    ADMIN = "admin", "Admin"
    SYSTEM = "system", "System"


class Event(models.Model):
    """One step of one thing that happened, chained to the event before it."""

    # The sealing columns: NULL until the sequencer seals the event, then set once (the triggers allow no other change).
    seq = models.BigIntegerField(unique=True, null=True, help_text="Position in the hash chain, from 1.")
    created_at = models.DateTimeField(db_index=True)
    actor_kind = models.CharField(max_length=16, choices=ActorKind.choices)
    actor_name = models.CharField(max_length=150)
    action = models.CharField(max_length=64)
    call_id = models.UUIDField(null=True, blank=True)
    agent_name = models.CharField(max_length=150, blank=True)
    tool_name = models.CharField(max_length=100, blank=True)
    data = models.JSONField(default=dict, blank=True)
    prev_hash = models.CharField(max_length=64, null=True)  # noqa: DJ001 — NULL is "not sealed", as seq's
    # Not unique-indexed: seq is, and each hash covers its seq and the one before, so two
    # equal hashes would be a SHA-256 collision; the index cost every append a random insert.
    hash = models.CharField(max_length=64, null=True)  # noqa: DJ001 — NULL is "not sealed", as seq's
    # SHA-256 of the canonical content (every hashed field but seq), computed at insert; NULL for events
    # chained before the sequencer, whose hash covers their content directly (audit/hashing.py).
    digest = models.CharField(max_length=64, null=True)  # noqa: DJ001 — NULL is "chained before digests"
    sealed_at = models.DateTimeField(null=True)

    class Meta:
        # By insertion: an event waiting to be sealed has no seq yet.
        ordering = ["-id"]
        # The audit pages' own permission: reading the whole log is not the same trust as deciding calls.
        permissions = [("browse_auditlog", "Can browse the audit log")]
        # Every insert and every seal updates every index: only what the audit log's
        # filters, a call's timeline and the sequencer read. Plain btrees (db_index on a
        # CharField would add a LIKE-pattern twin on PostgreSQL that nothing uses).
        indexes = [
            models.Index(fields=["call_id", "id"], name="audit_event_call_id"),
            # What the sequencer reads: the events waiting to be sealed, oldest insert first.
            models.Index(fields=["id"], condition=models.Q(seq__isnull=True), name="audit_event_unsealed"),
            models.Index(fields=["action"], name="audit_event_action"),
            models.Index(fields=["agent_name"], name="audit_event_agent"),
            models.Index(fields=["tool_name"], name="audit_event_tool"),
        ]

    def __str__(self) -> str:
        position = f"#{self.seq}" if self.seq is not None else f"(waiting to be sealed, id {self.pk})"
        return f"{position} {self.action} by {self.actor_kind}:{self.actor_name}"

    @property
    def sealed(self) -> bool:
        return self.seq is not None

    def content_fields(self) -> dict[str, object]:
        """Return the fields the digest covers: every hashed field but seq."""
        fields = self.hashed_fields()
        del fields["seq"]
        return fields

    def hashed_fields(self) -> dict[str, object]:
        """Return exactly the fields the hash covers, in a stable form."""
        return self.fields_to_hash(*(getattr(self, name) for name in HASHED_FIELDS))

    @staticmethod
    def fields_to_hash(
        seq: int | None,
        created_at: datetime | str,
        actor_kind: str,
        actor_name: str,
        action: str,
        call_id: UUID | str | None,
        agent_name: str,
        tool_name: str,
        data: object,
    ) -> dict[str, object]:
        """Return the hashed form of an event's fields (shared by writing and verifying).

        `created_at` may come as its hashed text already (isoformat() of a UTC datetime), `call_id` as its text.
        """
        return {
            "seq": seq,
            "created_at": created_at if isinstance(created_at, str) else created_at.isoformat(),
            "actor_kind": actor_kind,
            "actor_name": actor_name,
            "action": action,
            "call_id": str(call_id) if call_id else None,
            "agent_name": agent_name,
            "tool_name": tool_name,
            "data": data,
        }


class ActionCounts(models.Model):
    """How many events of each action the chain held through `through_seq` (folded by audit.counts)."""

    through_seq = models.BigIntegerField(unique=True)
    by_action = models.JSONField(default=dict)
    folded_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "action counts"

    def __str__(self) -> str:
        return f"events by action through #{self.through_seq}"
