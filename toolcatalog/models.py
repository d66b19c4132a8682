"""The tool catalog: tools, the risk tiers calls fall into, and the rules that raise a call's tier."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import Group
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import F
from django.db.models.functions import Lower

from audit.typealiases import DjangoValue
from toolcatalog.signals import announce_policy_change
from vault.fields import EncryptedTextField

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
    allows_standing_approvals = models.BooleanField(
        default=False,
        help_text="Tier 3 only: reviewers may approve calls like one they approve, for a while (standing "
        "approvals). Lower tiers always may; a standing approval takes this tier's approvals.",
    )

    class Meta:
        ordering = ["level"]

    def __str__(self) -> str:
        return f"{self.level} — {self.name}"


tool_name_validator = RegexValidator(r"^[A-Za-z0-9_.-]{1,100}$", "Letters, digits, _ . and - only.")


class ExecutorKind(models.TextChoices):
    PYTHON = "python", "Python callable (dotted path)"
    GATEHOUSE_PROTOCOL = "gatehouse_protocol", "Gatehouse protocol (three routes)"
    HTTP = "http", "HTTP API (method, URL template, headers)"
    MCP = "mcp", "Upstream MCP server tool"


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
    executor_kind = models.CharField(
        max_length=32, choices=ExecutorKind.choices, default=ExecutorKind.GATEHOUSE_PROTOCOL
    )
    executor_ref = models.CharField(
        max_length=300,
        help_text="python: a dotted path to an executor class; gatehouse_protocol: a path or URL the call is "
        "POSTed to (…/preview and …/verify beside it); http: the URL template, e.g. "
        "https://api.example.com/orders/{order_id}/cancel ({name}: that argument, percent-encoded).",
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


class PartOfToolPolicy(models.Model):
    """A part of how a tool's calls are judged or sent: saving or deleting one makes the tool a new version.

    Approvals bind the version they saw, so any change here sends approved calls back for approval.
    """

    tool: Tool  # each part's own foreign key

    class Meta:
        abstract = True

    def save(self, *args: DjangoValue, **kwargs: DjangoValue) -> None:
        """Save, and make the tool a new version."""
        super().save(*args, **kwargs)
        self.tool.bump_version()

    def delete(self, *args: DjangoValue, **kwargs: DjangoValue) -> tuple[int, dict[str, int]]:
        """Delete, and make the tool a new version."""
        tool = self.tool
        result = super().delete(*args, **kwargs)
        tool.bump_version()
        return result


class RiskRule(PartOfToolPolicy):
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


class CumulativeScope(models.TextChoices):
    AGENT = "agent", "Per agent"
    RESOURCE = "resource", "Per resource (the tool's resource argument)"
    TOOL = "tool", "The whole tool"


class CumulativeRule(PartOfToolPolicy):
    """Raises a call's tier when it takes a window's total over `over`: a sum of an argument, or a count of calls.

    The window counts the tool's calls created in the last `window` that are pending
    approval or were approved (executing, succeeded and needs-reconciliation too);
    refused, rejected, expired and failed calls do not count (approvals.limits).
    """

    tool = models.ForeignKey(Tool, on_delete=models.CASCADE, related_name="cumulative_rules")
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    sum_argument = models.CharField(
        max_length=100,
        blank=True,
        help_text="The numeric argument whose values are added up, e.g. valor_centavos. Empty: count the calls.",
    )
    per = models.CharField(max_length=16, choices=CumulativeScope.choices, default=CumulativeScope.AGENT)
    window = models.DurationField(help_text="How far back the total reaches, e.g. 24:00:00 for a day.")
    over = models.PositiveBigIntegerField(
        help_text="A call that takes the window's total above this is raised to the rule's tier."
    )
    tier = models.ForeignKey(RiskTier, on_delete=models.PROTECT, related_name="+")
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["tool", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tool", "name"], name="cumulativerule_unique_name_per_tool"),
            models.CheckConstraint(condition=models.Q(window__gt=timedelta(0)), name="cumulativerule_window_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.tool.name}: {self.name}"


class CumulativeLock(models.Model):
    """One row per (rule, scope key): proposals under the same limit lock it, so they are judged one at a time."""

    rule = models.ForeignKey(CumulativeRule, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=100)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["rule", "key"], name="cumulativelock_unique_key_per_rule")]

    def __str__(self) -> str:
        return f"{self.rule_id}: {self.key}"


class HttpMethod(models.TextChoices):
    GET = "GET", "GET"
    POST = "POST", "POST"
    PUT = "PUT", "PUT"
    PATCH = "PATCH", "PATCH"
    DELETE = "DELETE", "DELETE"


class HttpBody(models.TextChoices):
    ARGUMENTS = "arguments", "The arguments, as a JSON object"
    TEMPLATE = "template", "The body template"
    NONE = "none", "No body"


class HttpEndpoint(PartOfToolPolicy):
    """How an `http` tool's request is made (its URL template is the tool's executor reference)."""

    tool = models.OneToOneField(Tool, on_delete=models.CASCADE, related_name="http_endpoint")
    method = models.CharField(max_length=8, choices=HttpMethod.choices, default=HttpMethod.POST)
    body = models.CharField(max_length=16, choices=HttpBody.choices, default=HttpBody.ARGUMENTS)
    body_template = models.JSONField(
        null=True,
        blank=True,
        help_text='JSON sent as the body; a string that is exactly "{name}" becomes that argument\'s value '
        '(any JSON type; left out when the call lacks it). Example: {"amount": "{valor_centavos}", "currency": "BRL"}',
    )
    result_pointer = models.CharField(
        max_length=200,
        blank=True,
        help_text="A JSON pointer (RFC 6901) to the result in the answer, e.g. /data/refund. Empty: the whole answer.",
    )
    permanent_statuses = models.CharField(
        max_length=200,
        blank=True,
        help_text="Statuses that fail the call at once, e.g. 400-499, 501. Empty: every 4xx but 408, 425 and 429. "
        "Any other status from 400 up is retried with backoff.",
    )
    timeout_seconds = models.PositiveSmallIntegerField(
        default=20,
        validators=[MinValueValidator(1), MaxValueValidator(60)],
        help_text="How long to wait for the answer once the request is sent. No answer in time: a write needs "
        "reconciliation by a person (never sent again), a read-only or idempotent tool is retried.",
    )

    def __str__(self) -> str:
        return f"{self.method} {self.tool.executor_ref}"


class HttpHeader(PartOfToolPolicy):
    """A header an `http` tool's requests carry: a plain value, or a secret kept encrypted and never shown."""

    tool = models.ForeignKey(Tool, on_delete=models.CASCADE, related_name="http_headers")
    name = models.CharField(max_length=100, validators=[RegexValidator(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")])
    value = models.CharField(max_length=1000, blank=True, help_text="Shown in admin; for a secret, leave empty.")
    secret = EncryptedTextField(blank=True, help_text="Write-only: encrypted at rest and never shown again.")

    class Meta:
        ordering = ["tool", "name"]
        constraints = [models.UniqueConstraint(Lower("name"), "tool", name="httpheader_unique_name_per_tool")]

    def __str__(self) -> str:
        return self.name


class ApproverGroup(models.Model):
    """Members of `group` may approve `tool`'s calls at tier `min_tier` or above.

    For the tool, they replace the tier's own approver group. The rows with the highest
    threshold at or below a call's tier apply (`toolcatalog.approvers`); several groups
    there mean a call needing several approvals needs them from different groups.
    """

    tool = models.ForeignKey(Tool, on_delete=models.CASCADE, related_name="approver_groups")
    min_tier = models.PositiveSmallIntegerField(
        choices=TIER_LEVELS,
        validators=[MaxValueValidator(3)],
        help_text="From this tier up; the highest threshold at or below a call's tier applies.",
    )
    group = models.ForeignKey(
        Group,
        on_delete=models.CASCADE,
        related_name="+",
        help_text="Several groups at one threshold: several approvals come from different groups.",
    )

    class Meta:
        ordering = ["tool", "min_tier", "group__name"]
        constraints = [
            models.UniqueConstraint(fields=["tool", "min_tier", "group"], name="approvergroup_unique_per_tool_tier")
        ]

    def __str__(self) -> str:
        return f"{self.tool.name} at tier ≥ {self.min_tier}: {self.group.name}"


# The upstream MCP servers tools come from: their models load with the catalog's.
from toolcatalog import upstreams as _upstreams  # noqa: E402, F401
