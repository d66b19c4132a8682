"""Channels, the rules that route events to them, and the outbox of deliveries.

A Delivery is one event for one route: (route, event key) is unique, so an event is
delivered at most once per route however often it is recorded or swept; its id is the
delivery id a receiver dedupes on (a webhook's `webhook-id`, an email's Message-ID).
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone

from vault.fields import EncryptedTextField


class Kind(models.TextChoices):
    EMAIL = "email", "Email"
    SLACK = "slack", "Slack"
    WEBHOOK = "webhook", "Webhook"


class EventType(models.TextChoices):
    PENDING = "call.pending", "A call waits for a reviewer"
    REMINDER = "call.reminder", "Reminder (50 % and 90 % of the approval window)"
    ESCALATED = "call.escalated", "Escalation (90 % of the window passed undecided)"
    DECIDED = "call.decided", "A call was approved, rejected or expired"
    SUCCEEDED = "call.succeeded", "A call succeeded"
    FAILED = "call.failed", "A call failed"
    NEEDS_RECONCILIATION = "call.needs_reconciliation", "A call needs reconciliation"
    BREAKER_OPENED = "breaker.opened", "A circuit breaker opened"
    TEST = "gatehouse.test", "Test event"


class Channel(models.Model):
    """Somewhere messages go: a set of mail addresses, a Slack channel, or a webhook endpoint."""

    name = models.SlugField(max_length=60, unique=True)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    enabled = models.BooleanField(default=True)
    # Email: the addresses each message goes to (besides reviewers who asked for mail).
    email_to = models.JSONField(default=list, blank=True, help_text="Email: addresses, as a JSON list.")
    # Slack: the channel to post in, and the Web API's base URL (the real one unless testing).
    slack_channel = models.CharField(max_length=100, blank=True, help_text="Slack: channel id or #name.")
    api_url = models.URLField(blank=True, help_text="Slack: Web API base URL; blank for https://slack.com/api/.")
    # Webhook: where CloudEvents are POSTed.
    url = models.URLField(blank=True, help_text="Webhook: the endpoint receiving CloudEvents.")
    # Slack: the bot token; webhook: the Standard Webhooks secret (whsec_…). Write-only in the admin.
    secret = EncryptedTextField(blank=True, help_text="Slack bot token, or the webhook's whsec_ secret.")
    signing_secret = EncryptedTextField(blank=True, help_text="Slack: the app's signing secret.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"

    def target(self) -> str:
        """Return where this channel sends, as an operator reads it (never a secret)."""
        if self.kind == Kind.EMAIL:
            return ", ".join(self.email_to)
        if self.kind == Kind.SLACK:
            return self.slack_channel
        return self.url


class Route(models.Model):
    """A rule: these events, for calls at this tier or above, of these tools and agents, go to this channel.

    Empty lists match everything, except that escalations go only to routes that name
    `call.escalated` (an escalation is a second route, by definition).
    """

    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="routes")
    enabled = models.BooleanField(default=True)
    events = models.JSONField(default=list, blank=True, help_text="Event types (JSON list); empty: all.")
    min_tier = models.PositiveSmallIntegerField(default=2, help_text="Calls at this tier or above.")
    tools = models.JSONField(default=list, blank=True, help_text="Tool names (JSON list); empty: all.")
    agents = models.JSONField(default=list, blank=True, help_text="Agent names (JSON list); empty: all.")
    email_to = models.JSONField(default=list, blank=True, help_text="Email: more addresses for this route.")

    class Meta:
        ordering = ["channel__name", "pk"]

    def __str__(self) -> str:
        events = ", ".join(self.events) or "every event"
        return f"{events} of tier ≥ {self.min_tier} → {self.channel.name}"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    SENDING = "sending", "Sending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"
    SKIPPED = "skipped", "Skipped (no longer relevant)"


class Delivery(models.Model):
    """One event for one channel: the delivery's row, and its log (status, attempts, last error)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    route = models.ForeignKey(Route, null=True, blank=True, on_delete=models.SET_NULL, related_name="deliveries")
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="deliveries")
    event_type = models.CharField(max_length=40, choices=EventType.choices)
    # What makes the event one: the audit event's seq, or "reminder-50:<call id>"; unique per channel.
    event_key = models.CharField(max_length=100)
    call_id = models.UUIDField(null=True, blank=True, db_index=True)
    payload = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    # Pending: not before (a retry's backoff; the sweeper leaves a fresh one to its own message). Sending: the lease.
    due_at = models.DateTimeField(default=timezone.now)
    last_error = models.TextField(blank=True)
    # What the channel answered that a later message needs (Slack: the channel and ts to update in place).
    external = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "deliveries"
        constraints = [
            models.UniqueConstraint(fields=["channel", "event_key"], name="delivery_once_per_channel_and_event"),
        ]
        indexes = [models.Index(fields=["status", "due_at"], name="delivery_due")]

    def __str__(self) -> str:
        return f"{self.event_type} → {self.channel.name} ({self.status})"


class Cursor(models.Model):
    """How far into the audit chain routing has read: every event up to `last_seq` was routed.

    The chain is the outbox: events commit in seq order, so each routing run reads the
    events after the cursor, writes their deliveries and moves the cursor, in one
    transaction holding this row. One row, made by the migration at the chain's head then
    (a missing row starts from the beginning: the unique deliveries keep a replay harmless).
    """

    last_seq = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"routed up to #{self.last_seq}"


class Reminder(models.Model):
    """That a pending call's reminder (50, 90) or escalation (the stage 'escalation') was routed: once each."""

    call_id = models.UUIDField()
    stage = models.CharField(max_length=16)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["call_id", "stage"], name="reminder_once_per_stage")]

    def __str__(self) -> str:
        return f"{self.stage} of {self.call_id}"


class SlackIdentity(models.Model):
    """A Slack user, mapped to the Gatehouse user who decides as them (by verified email, or a linking step)."""

    slack_user_id = models.CharField(max_length=40)
    team_id = models.CharField(max_length=40, blank=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team_id", "slack_user_id"], name="slack_identity_once"),
        ]

    def __str__(self) -> str:
        return f"{self.slack_user_id} → {self.user}"


class Preference(models.Model):
    """A reviewer's own choice: mail me the calls waiting for a reviewer (to my account's address)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    email_pending = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"{self.user}: {'mail' if self.email_pending else 'no mail'}"
