"""The tool catalog: tools, the risk tiers calls fall into, and the rules that raise a call's tier."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import Group
from django.core.validators import MaxValueValidator, RegexValidator
from django.db import models
from django.db.models import F

from audit.typealiases import DjangoValue
from toolcatalog.signals import announce_policy_change

TIER_LEVELS = [(0, "0 — read"), (1, "1 — reversible write"), (2, "2 — irreversible write"), (3, "3 — critical")]


class RiskTier(models.Model):
    """A blast-radius level and what it takes to let a call at that level run."""

    level = models.PositiveSmallIntegerField(unique=True, choices=TIER_LEVELS, validators=[MaxValueValidator(3)])
    name = models.CharField(max_length=60)
    description = models.TextField(blank=True)
    requires_approval = models.BooleanField(default=False)
    approvals_required = models.PositiveSmallIntegerField(
        default=0, help_text="Distinct reviewers who must approve (2 = four-eyes)."
    )
    approval_window = models.DurationField(
        default=timedelta(hours=24), help_text="A pending call expires after this long."
    )
    approver_group = models.ForeignKey(
        Group,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Only members of this group may approve calls at this tier. Empty: any reviewer.",
    )

    class Meta:
        ordering = ["level"]

    def __str__(self) -> str:
        return f"{self.level} — {self.name}"


tool_name_validator = RegexValidator(r"^[A-Za-z0-9_.-]{1,100}$", "Letters, digits, _ . and - only.")


class ExecutorKind(models.TextChoices):
    PYTHON = "python", "Python callable (dotted path)"
    HTTP = "http", "HTTP endpoint"


class Tool(models.Model):
    """A capability agents may propose to use, with its contract and its executor."""

    name = models.CharField(max_length=100, unique=True, validators=[tool_name_validator])
    title = models.CharField(max_length=200, blank=True)
    description = models.TextField()
    input_schema = models.JSONField(help_text="JSON Schema (2020-12) the arguments must satisfy.")
    output_schema = models.JSONField(null=True, blank=True)
    read_only_hint = models.BooleanField(default=False)
    destructive_hint = models.BooleanField(default=True)
    idempotent_hint = models.BooleanField(default=False)
    open_world_hint = models.BooleanField(default=True)
    base_tier = models.ForeignKey(RiskTier, on_delete=models.PROTECT, related_name="+")
    executor_kind = models.CharField(max_length=16, choices=ExecutorKind.choices, default=ExecutorKind.HTTP)
    executor_ref = models.CharField(
        max_length=300,
        help_text="python: a dotted path to an executor class; http: a path or URL the call is POSTed to.",
    )
    audience = models.CharField(
        max_length=300,
        blank=True,
        help_text="The `aud` of this tool's scoped credentials: what its downstream checks. "
        "Empty: the origin of its HTTP endpoint (scheme://host:port).",
    )
    resource_argument = models.CharField(
        max_length=100, blank=True, help_text="The argument that names the resource the call acts on."
    )
    enabled = models.BooleanField(default=True)
    version = models.PositiveIntegerField(default=1, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: DjangoValue, **kwargs: DjangoValue) -> None:
        """Save; every change to an existing tool is a new version, announced after commit."""
        changed = self.pk is not None and not self._state.adding
        if changed:
            self.version = (Tool.objects.filter(pk=self.pk).values_list("version", flat=True).first() or 0) + 1
        super().save(*args, **kwargs)
        if changed:
            announce_policy_change(Tool, tool_id=self.pk)

    def bump_version(self) -> None:
        """Record that something the tool's policy depends on changed (e.g. a rule)."""
        Tool.objects.filter(pk=self.pk).update(version=F("version") + 1)
        self.refresh_from_db(fields=["version"])
        announce_policy_change(Tool, tool_id=self.pk)

    @property
    def annotations(self) -> dict[str, object]:
        """Return MCP tool annotations."""
        return {
            "title": self.title or self.name,
            "readOnlyHint": self.read_only_hint,
            "destructiveHint": self.destructive_hint,
            "idempotentHint": self.idempotent_hint,
            "openWorldHint": self.open_world_hint,
        }

    def takes_idempotency_key(self) -> bool:
        """Return whether the tool's own schema has an `idempotency_key` argument."""
        return "idempotency_key" in (self.input_schema.get("properties") or {})


class RiskRule(models.Model):
    """Raises a call's tier when its arguments match `condition` (a JSON Schema)."""

    tool = models.ForeignKey(Tool, on_delete=models.CASCADE, related_name="rules")
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    condition = models.JSONField(
        help_text="A JSON Schema over the arguments; the rule fires when they match it. "
        'Example: {"properties": {"valor_centavos": {"minimum": 20001}}}'
    )
    tier = models.ForeignKey(RiskTier, on_delete=models.PROTECT, related_name="+")
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["tool", "name"]
        constraints = [models.UniqueConstraint(fields=["tool", "name"], name="riskrule_unique_name_per_tool")]

    def __str__(self) -> str:
        return f"{self.tool.name}: {self.name}"

    def save(self, *args: DjangoValue, **kwargs: DjangoValue) -> None:
        """Save, and make the tool's policy a new version."""
        super().save(*args, **kwargs)
        self.tool.bump_version()

    def delete(self, *args: DjangoValue, **kwargs: DjangoValue) -> tuple[int, dict[str, int]]:
        """Delete, and make the tool's policy a new version."""
        tool = self.tool
        result = super().delete(*args, **kwargs)
        tool.bump_version()
        return result
