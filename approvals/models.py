"""Tool calls and the decisions people make about them: the rows. What happens to them is `approvals.lifecycle`."""

from __future__ import annotations

import uuid
from datetime import datetime

from django.conf import settings
from django.db import models
from django.utils import timezone

from agents.models import Agent
from approvals.states import DecisionKind, Status
from toolcatalog.models import Tool


class ToolCall(models.Model):
    """One proposal of one agent to call one tool, and everything that happened to it."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # No index of its own: toolcall_conversation starts with agent.
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="calls", db_index=False)
    # No index: nothing looks calls up by person, and every proposal would pay for one.
    on_behalf_of = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="calls_on_behalf",
        db_index=False,
        help_text="The person the agent acted for: who let an OAuth client act as it (empty for agent tokens).",
    )
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
    # The proposal's W3C trace context: an execution continues the agent's trace, however long after
    # the proposal a reviewer approves it (approvals.telemetry).
    traceparent = models.CharField(max_length=55, blank=True, default="", editable=False)
    tracestate = models.CharField(max_length=512, blank=True, default="", editable=False)

    # Not a column: set by the console's activity page on the calls it lists (who approved or rejected each).
    deciders: list[str]
    # Not a column: a new call's sensitive argument values, on their way to the vault (approvals.sensitive).
    sensitive_values: dict[str, object]

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
            # The overview's decisions: only calls a person decided, rejected or let expire, so its figures
            # read a window's decisions, never its pending backlog or the calls that ran on their own.
            models.Index(
                # Every column the overview reads, as keys (SQLite has no INCLUDE): its scans stay in the index.
                fields=["created_at", "approvals_required", "decided_at", "status", "risk_tier", "tool"],
                # approvals.views.overview.REVIEW_OUTCOME: the same condition, so its queries can use the index.
                condition=models.Q(approvals_required__gt=0, decided_at__isnull=False)
                | models.Q(status__in=[Status.REJECTED, Status.EXPIRED]),
                name="toolcall_review_outcome",
            ),
            # The pending calls whose window has passed: the sweeper expires them, and the overview
            # subtracts them from the tally's pending calls, without walking the pending backlog.
            models.Index(
                fields=["expires_at"],
                condition=models.Q(status=Status.PENDING_APPROVAL),
                name="toolcall_pending_expiry",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tool.name} by {self.agent.name} ({self.status})"

    @property
    def proposer(self) -> str:
        """Return who proposed the call as people read it: "support-agent for carla@example.com", or the agent."""
        person = self.on_behalf_of
        if person is None:
            return self.agent.name
        return f"{self.agent.name} for {person.email or person.get_username()}"

    def approver_names(self) -> list[str]:
        """Return who approved the current arguments under the current tool version.

        Whoever edited the call into these arguments proposed them, so their approval of
        them never counts (an edit back to arguments they had approved earlier included).
        """
        editors = self.decisions.filter(kind=DecisionKind.EDIT, arguments_hash=self.arguments_hash)
        names = (
            self.approvals()
            .exclude(reviewer_name__in=editors.values("reviewer_name"))
            .values_list("reviewer_name", flat=True)
        )
        return sorted(set(names))

    def approval_count(self) -> int:
        """Return how many distinct reviewers' approvals of the call as it stands count."""
        return len(self.approver_names())

    def approvals(self) -> models.QuerySet[Decision]:
        """Return the approvals of the current arguments under the current tool version."""
        return self.decisions.filter(
            kind=DecisionKind.APPROVE, arguments_hash=self.arguments_hash, tool_version=self.tool_version
        )


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


class StandingApproval(models.Model):
    """A reviewer's approval of calls like one they approved: same tool and agent, arguments matching `condition`.

    It approves at most `max_uses` later proposals at up to `risk_tier`, under the tool
    version it was given for, until `expires_at` or its revocation, once it has the
    tier's approvals (`approvals_required` distinct reviewers: `activated_at`).
    What happens to it is `approvals.standing`.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="standing_approvals")
    tool = models.ForeignKey(Tool, on_delete=models.PROTECT, related_name="standing_approvals")
    tool_version = models.PositiveIntegerField(help_text="The tool version it was given under; another is not covered.")
    risk_tier = models.PositiveSmallIntegerField(help_text="The highest tier of call it covers.")
    condition = models.JSONField(help_text="A JSON Schema the arguments of a covered call match.")
    max_uses = models.PositiveIntegerField()
    uses = models.PositiveIntegerField(default=0)
    approvals_required = models.PositiveSmallIntegerField(default=1)
    source_call = models.ForeignKey(ToolCall, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_by_name = models.CharField(max_length=150)
    created_at = models.DateTimeField(default=timezone.now)
    activated_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by_name = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=models.Q(uses__lte=models.F("max_uses")), name="standing_uses_within_max")
        ]
        indexes = [models.Index(fields=["agent", "tool", "expires_at"], name="standing_for_agent_tool")]

    def __str__(self) -> str:
        return f"{self.tool.name} for {self.agent.name} ({self.uses}/{self.max_uses})"

    def state(self, now: datetime) -> str:
        """Return where it stands: revoked, expired, used up, waiting for approvals, or active."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at <= now:
            return "expired"
        if self.uses >= self.max_uses:
            return "used up"
        return "active" if self.activated_at is not None else "waiting for approvals"


class StandingApprover(models.Model):
    """One reviewer's approval of a standing approval (four-eyes tiers take two)."""

    standing = models.ForeignKey(StandingApproval, on_delete=models.CASCADE, related_name="approvers")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    reviewer_name = models.CharField(max_length=150)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            models.UniqueConstraint(fields=["standing", "reviewer_name"], name="standing_one_approval_per_reviewer")
        ]

    def __str__(self) -> str:
        return f"{self.reviewer_name} approved {self.standing_id}"


class CallTally(models.Model):
    """How many calls proposed on `day` (UTC) are in `status` at `risk_tier`: one row per change, summed when read.

    Written by PostgreSQL's triggers on approvals_toolcall (migration 0011), never by
    Gatehouse's code: +1 for a call's new (day, status, tier), −1 for the one it left,
    whatever the statement. Writers only insert, so no counter row is contended on the
    hot path; `approvals.tally.fold` sums the rows of each key into one now and then.
    """

    day = models.DateField()
    status = models.CharField(max_length=24, choices=Status.choices)
    risk_tier = models.SmallIntegerField(null=True)
    calls = models.BigIntegerField()

    class Meta:
        indexes = [models.Index(fields=["day", "status"], name="calltally_day_status")]

    def __str__(self) -> str:
        return f"{self.day} {self.status} T{self.risk_tier}: {self.calls:+d}"


class DecisionWaits(models.Model):
    """How long held calls had waited when a reviewer decided them, through the chain's `through_seq`.

    A histogram of the decision events sealed up to `through_seq`, folded by
    `approvals.decision_waits`: `counts[i]` decisions waited at most bucket i's bound
    and more than the one before (the last: more than every bound).
    """

    through_seq = models.BigIntegerField(unique=True)
    counts = models.JSONField(default=list)
    waited_seconds = models.FloatField(default=0.0)
    folded_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "decision waits"

    def __str__(self) -> str:
        return f"decision waits through #{self.through_seq}"
