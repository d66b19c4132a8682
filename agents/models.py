"""Agents (programs that propose tool calls), what each may use, and their breakers."""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.core.validators import MaxValueValidator
from django.db import models
from django.utils import timezone

from toolcatalog.models import TIER_LEVELS, Tool
from toolcatalog.policy import TierSpec

TOKEN_PREFIX = "gh_"  # noqa: S105 — a prefix, not a secret


def hash_token(token: str) -> str:
    """Return the stored form of a bearer token (tokens are random, so SHA-256 suffices)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    """Return a fresh random bearer token."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


class Agent(models.Model):
    """A program that proposes calls; authenticated by a bearer token stored only hashed."""

    name = models.CharField(max_length=150, unique=True)
    description = models.TextField(blank=True)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="agents",
        help_text="The person responsible for this agent. They may not approve its calls.",
    )
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    token_hint = models.CharField(max_length=12, editable=False, help_text="The token's first characters.")
    active = models.BooleanField(default=True)
    max_calls_per_conversation = models.PositiveIntegerField(
        default=100,
        help_text="Budget: calls one conversation may have accepted (0 = unlimited); refusals and replays spend none.",
    )
    max_calls_per_window = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Budget: calls this agent may have accepted per window, whatever its conversations "
        "(empty = GATEHOUSE_AGENT_BUDGET_CALLS; 0 = unlimited).",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def set_new_token(self) -> str:
        """Replace the token with a fresh one and return it; only its hash is kept."""
        token = new_token()
        self.token_hash = hash_token(token)
        self.token_hint = token[:10]
        return token

    def rotate_token(self) -> str:
        """Issue a new token; the old one stops working at once."""
        token = self.set_new_token()
        self.save(update_fields=["token_hash", "token_hint"])
        return token

    @classmethod
    def authenticate(cls, token: str) -> Agent | None:
        """Return the active agent holding `token`, or None."""
        if not token:
            return None
        agent = cls.objects.filter(token_hash=hash_token(token), active=True).first()
        if agent is not None:
            agent.touch()
        return agent

    def touch(self) -> None:
        """Note that the agent was seen (at most once a minute, to spare writes)."""
        now = timezone.now()
        if self.last_seen_at is None or (now - self.last_seen_at).total_seconds() > 60:
            Agent.objects.filter(pk=self.pk).update(last_seen_at=now)
            self.last_seen_at = now


class Grant(models.Model):
    """Lets an agent see a tool and propose calls up to a risk tier."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="grants")
    tool = models.ForeignKey(Tool, on_delete=models.CASCADE, related_name="grants")
    max_tier = models.PositiveSmallIntegerField(choices=TIER_LEVELS, validators=[MaxValueValidator(3)])

    # Not columns: set when agents.grants reads a grant for a proposal (its breaker and the tiers in force).
    breaker_open: bool
    breaker_failures: int
    tier_specs: dict[int, TierSpec]
    # Read with the grant on PostgreSQL (approvals.store): whether a standing approval could cover a call.
    standing_possible: bool

    class Meta:
        ordering = ["agent", "tool"]
        constraints = [models.UniqueConstraint(fields=["agent", "tool"], name="grant_unique_agent_tool")]

    def __str__(self) -> str:
        return f"{self.agent.name} → {self.tool.name} (≤ tier {self.max_tier})"


class CircuitBreaker(models.Model):
    """Consecutive failures for one agent and tool, of one kind and of any kind; open at either threshold."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="breakers")
    tool = models.ForeignKey(Tool, on_delete=models.CASCADE, related_name="breakers")
    failure_kind = models.CharField(max_length=64, blank=True)
    consecutive_failures = models.PositiveIntegerField(default=0, help_text="Of `failure_kind`, in a row.")
    consecutive_any_kind = models.PositiveIntegerField(default=0, help_text="Of any kind, in a row.")
    opened_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "tool"], name="breaker_unique_agent_tool")]

    def __str__(self) -> str:
        state = "open" if self.opened_at else "closed"
        return f"{self.agent.name}/{self.tool.name}: {state}"


class BudgetScope(models.TextChoices):
    CONVERSATION = "conversation", "conversation"
    WINDOW = "window", "agent per window"


# The constraint that refuses a call past a budget's limit (agents.budgets, approvals.store).
USED_WITHIN_CAP = "budgetcounter_used_within_cap"


class BudgetCounter(models.Model):
    """Calls an agent has made in one budget's scope: one conversation, or one window of time.

    A call is spent in the transaction that stores it (agents.budgets), so the
    database, not a count read earlier, decides the last call a budget allows.
    """

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="budget_counters")
    scope = models.CharField(max_length=16, choices=BudgetScope.choices)
    # The conversation_id, or the window's start in ISO 8601.
    key = models.CharField(max_length=200)
    used = models.PositiveIntegerField(default=0)
    # The limit the last call was counted against (None: not recorded yet); the database refuses to count past it.
    cap = models.PositiveIntegerField(null=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "scope", "key"], name="budgetcounter_unique_agent_scope_key"),
            models.CheckConstraint(
                condition=models.Q(cap__isnull=True) | models.Q(used__lte=models.F("cap")), name=USED_WITHIN_CAP
            ),
        ]

    def __str__(self) -> str:
        return f"{self.agent_id}/{self.scope}/{self.key}: {self.used}"
