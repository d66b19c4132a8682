"""One table: what the bare endpoint inserts and the bare tasks update."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class BareRow(models.Model):
    """A proposal body stored as is: the least any ingest endpoint must write."""

    # Unique like a call's idempotency key, so the insert pays for the same kind of index.
    key = models.CharField(max_length=255, unique=True)
    payload = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now)
    done_at = models.DateTimeField(null=True, blank=True)
    # The bare governed shape's claim and the downstream's answer (bench.bare.tasks.claim_call_and_tell).
    claimed_at = models.DateTimeField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)

    def __str__(self) -> str:
        return self.key
