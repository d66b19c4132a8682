"""Tool calls and the decisions people make about them.

Every state change is a compare-and-set (`UPDATE … WHERE status = expected`) that
writes its audit event in the same transaction; effects outside the database
(enqueueing execution) are scheduled on commit.
"""

from __future__ import annotations

import uuid
from functools import partial
from typing import Any

from django.conf import settings
from django.db import connection, models, transaction
from django.utils import timezone

from agents.models import Agent
from approvals.executing import ExecutionSteps
from approvals.reviewing import ReviewActions
from approvals.rows import insert_statement
from approvals.states import SETTLED_STATUSES, SYSTEM, TERMINAL_STATUSES, DecisionKind, Status
from approvals.watch import announce
from audit.chain import new_event, record
from audit.models import Event
from toolcatalog.models import Tool

# Re-exported: the rest of the project imports states from here.
__all__ = ["SETTLED_STATUSES", "SYSTEM", "TERMINAL_STATUSES", "Decision", "DecisionKind", "Status", "ToolCall"]


class ToolCall(ReviewActions, ExecutionSteps, models.Model):
    """One proposal of one agent to call one tool, and everything that happened to it."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # No index of its own: toolcall_conversation starts with agent.
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="calls", db_index=False)
    tool = models.ForeignKey(Tool, on_delete=models.PROTECT, related_name="calls")
    tool_version = models.PositiveIntegerField(help_text="The tool version the call was judged under.")
    arguments = models.JSONField()
    arguments_hash = models.CharField(max_length=64, help_text="SHA-256 of the canonical arguments.")
    original_arguments = models.JSONField(
        null=True, blank=True, help_text="The agent's arguments, when a reviewer edited them."
    )
    request_hash = models.CharField(
        max_length=64, help_text="SHA-256 of tool and arguments as proposed: what idempotency compares."
    )
    # NULL, not "", so the unique constraint ignores calls without a key.
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    conversation_id = models.CharField(max_length=200, blank=True)
    step = models.IntegerField(null=True, blank=True)
    call_index = models.IntegerField(null=True, blank=True)
    justification = models.TextField(blank=True)
    status = models.CharField(max_length=24, choices=Status.choices)
    risk_tier = models.PositiveSmallIntegerField(null=True, blank=True)
    risk_reasons = models.JSONField(default=list, blank=True)
    approvals_required = models.PositiveSmallIntegerField(default=0)
    error = models.JSONField(null=True, blank=True)
    preview = models.JSONField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    approved_arguments_hash = models.CharField(max_length=64, blank=True)
    approved_tool_version = models.PositiveIntegerField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    decided_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        permissions = [("review_toolcall", "Can work the review queue and decide calls")]
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "idempotency_key"],
                condition=models.Q(idempotency_key__isnull=False),
                name="toolcall_unique_idempotency_key_per_agent",
            )
        ]
        indexes = [
            models.Index(fields=["status", "-risk_tier", "created_at"], name="toolcall_queue"),
            models.Index(fields=["agent", "conversation_id", "tool", "created_at"], name="toolcall_conversation"),
            models.Index(fields=["created_at"], name="toolcall_created"),
        ]

    def __str__(self) -> str:
        return f"{self.tool.name} by {self.agent.name} ({self.status})"

    def insert(self) -> None:
        """INSERT this new call with a statement built once per process.

        Proposals are the hot path, and `save()` compiles its INSERT anew each time.
        No signals are sent (none are connected for calls); a taken idempotency key
        raises IntegrityError as save() would.
        """
        with connection.cursor() as cursor:
            cursor.execute(*self.insert_statement())
        self.inserted()

    def insert_statement(self) -> tuple[str, list[Any]]:
        """Return the INSERT of this new call and its values, for `insert()` or a batch of statements."""
        return insert_statement(self)

    def inserted(self) -> None:
        """Mark this call as stored (what save() does after its INSERT)."""
        self._state.adding = False
        self._state.db = connection.alias

    def audit(self, action: str, *, actor: tuple[str, str], data: dict[str, Any] | None = None) -> None:
        """Write an audit event about this call (inside the caller's transaction); announce it on commit."""
        record(
            action,
            actor=actor,
            call_id=self.pk,
            agent_name=self.agent.name,
            tool_name=self.tool.name,
            data=data,
        )
        if action != "call.proposed" and self.worth_announcing():
            transaction.on_commit(partial(announce, self.pk, self.status))

    def event(self, action: str, *, actor: tuple[str, str], data: dict[str, Any] | None = None) -> Event:
        """Return an audit event about this call, to append with its change (`audit.chain.record_if_changed`)."""
        return new_event(action, actor, self.pk, self.agent.name, self.tool.name, data)

    def worth_announcing(self) -> bool:
        # Only a status that can end a wait is worth telling (nobody waits on a call before
        # it exists, and approved or executing end no wait).
        return self.status in SETTLED_STATUSES

    def transition(
        self,
        expected: str | tuple[str, ...],
        to: str,
        *,
        actor: tuple[str, str],
        action: str,
        data: dict[str, Any] | None = None,
        **fields: Any,
    ) -> bool:
        """Move from `expected` to `to` if, and only if, the row is still in `expected`.

        Returns whether this caller won. The audit event commits with the change.
        """
        allowed = (expected,) if isinstance(expected, str) else expected
        with transaction.atomic():
            changed = ToolCall.objects.filter(pk=self.pk, status__in=allowed).update(status=to, **fields)
            if not changed:
                return False
            self.status = to
            for name, value in fields.items():
                setattr(self, name, value)
            self.audit(action, actor=actor, data={"from": list(allowed), "to": to, **(data or {})})
        return True


class Decision(models.Model):
    """A reviewer's act on a call, bound to the exact arguments and tool version they saw."""

    call = models.ForeignKey(ToolCall, on_delete=models.CASCADE, related_name="decisions")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    reviewer_name = models.CharField(max_length=150)
    kind = models.CharField(max_length=16, choices=DecisionKind.choices)
    reason = models.TextField(blank=True)
    arguments_hash = models.CharField(max_length=64)
    tool_version = models.PositiveIntegerField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            # One reviewer approving the same arguments under the same tool version twice counts once.
            models.UniqueConstraint(
                fields=["call", "reviewer", "arguments_hash", "tool_version"],
                condition=models.Q(kind="approve"),
                name="decision_one_approval_per_reviewer",
            )
        ]

    def __str__(self) -> str:
        return f"{self.reviewer_name} {self.kind} {self.call_id}"
