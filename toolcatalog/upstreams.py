"""Upstream MCP servers: where a team's existing tools come from, and the link of each catalog tool to one.

An upstream is reached over Streamable HTTP (a URL and request headers) or stdio (a
command the worker starts, with its environment). Header and environment values
may be credentials, so every value is kept encrypted at rest and is write-only in
the admin (`vault.fields.EncryptedTextField`); pages, the API, the audit log and
the commands show only their names.

The catalog tools an upstream offers are ordinary `Tool` rows (executor kind
`mcp`), each linked to its upstream by an `UpstreamTool` that remembers what the
upstream last said of it, so a sync can tell what changed and what an admin set.
This module holds no sync logic (`toolcatalog.upstreams_sync`) and imports no other
module of the catalog: `toolcatalog.models` imports it, so its models load with the app.
"""

from __future__ import annotations

import re
import shlex

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models

from vault.fields import EncryptedTextField

NAME_PATTERN = r"^[A-Za-z0-9_-]{1,40}$"
upstream_name_validator = RegexValidator(NAME_PATTERN, "1 to 40 letters, digits, _ and - only.")


class Transport(models.TextChoices):
    STREAMABLE_HTTP = "streamable_http", "Streamable HTTP (URL)"
    STDIO = "stdio", "stdio (a command the worker starts)"


class SyncStatus(models.TextChoices):
    NEVER = "never", "never synced"
    OK = "ok", "synced"
    PARTIAL = "partial", "synced, some tools skipped"
    FAILED = "failed", "last sync failed"


class Upstream(models.Model):
    """An MCP server whose tools Gatehouse governs."""

    name = models.CharField(max_length=40, unique=True, validators=[upstream_name_validator])
    prefix = models.CharField(
        max_length=40,
        blank=True,
        validators=[upstream_name_validator],
        help_text="Catalog tools are named <prefix>_<tool>. Empty: the upstream's name.",
    )
    transport = models.CharField(max_length=20, choices=Transport.choices, default=Transport.STREAMABLE_HTTP)
    url = models.URLField(max_length=500, blank=True, help_text="streamable_http: the MCP endpoint's URL.")
    command = models.CharField(
        max_length=1000, blank=True, help_text="stdio: the command line that starts the server (shell-quoted)."
    )
    enabled = models.BooleanField(default=True, help_text="Disabled: not synced, and its calls are not sent.")
    sync_status = models.CharField(max_length=10, choices=SyncStatus.choices, default=SyncStatus.NEVER, editable=False)
    synced_at = models.DateTimeField(null=True, blank=True, editable=False)
    sync_message = models.TextField(blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """Refuse a transport without what it needs (a URL, or a command that parses)."""
        if self.transport == Transport.STREAMABLE_HTTP and not self.url:
            raise ValidationError({"url": "A streamable_http upstream needs its URL."})
        if self.transport == Transport.STDIO:
            if not self.command.strip():
                raise ValidationError({"command": "A stdio upstream needs the command that starts it."})
            try:
                shlex.split(self.command)
            except ValueError as exc:
                raise ValidationError({"command": f"The command does not parse: {exc}."}) from exc

    @property
    def tool_prefix(self) -> str:
        return self.prefix or self.name

    def argv(self) -> list[str]:
        """Return the stdio command as program and arguments."""
        return shlex.split(self.command)

    def where(self) -> str:
        """Return where the upstream is, for messages: its URL, or its program (never headers or environment)."""
        if self.transport == Transport.STDIO:
            argv = self.command.split()
            return f"stdio:{argv[0]}" if argv else "stdio"
        return self.url


class ValueKind(models.TextChoices):
    HEADER = "header", "HTTP header"
    ENV = "env", "environment variable"


header_name_validator = RegexValidator(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$", "A header or variable name.")


class UpstreamValue(models.Model):
    """One request header (streamable_http) or environment variable (stdio) of an upstream; its value is secret."""

    upstream = models.ForeignKey(Upstream, on_delete=models.CASCADE, related_name="values")
    kind = models.CharField(max_length=10, choices=ValueKind.choices)
    name = models.CharField(max_length=100, validators=[header_name_validator])
    value = EncryptedTextField(blank=True, help_text="Write-only: never shown again after save.")

    class Meta:
        ordering = ["upstream", "kind", "name"]
        constraints = [
            models.UniqueConstraint(fields=["upstream", "kind", "name"], name="upstreamvalue_unique_name"),
        ]

    def __str__(self) -> str:
        return f"{self.upstream.name} {self.kind} {self.name}"


class UpstreamTool(models.Model):
    """The link of one catalog tool to the upstream tool it governs, and what the upstream last said of it."""

    upstream = models.ForeignKey(Upstream, on_delete=models.PROTECT, related_name="tools")
    tool = models.OneToOneField("toolcatalog.Tool", on_delete=models.CASCADE, related_name="upstream_link")
    remote_name = models.CharField(max_length=200, help_text="The tool's name on its upstream.")
    definition = models.JSONField(
        default=dict, editable=False, help_text="title, description, inputSchema, annotations as last synced."
    )
    synced_tier = models.PositiveSmallIntegerField(
        editable=False, help_text="The base tier the annotations gave; an admin's other choice is kept."
    )
    gone = models.BooleanField(default=False, editable=False, help_text="Absent from the upstream's last tools/list.")
    disabled_by_sync = models.BooleanField(default=False, editable=False)
    repeat_safe = models.BooleanField(
        default=False,
        help_text="Safe to send again after an unanswered attempt (a read, or idempotent upstream). "
        "MCP has no idempotency key: leave off for any write.",
    )
    preview_tool = models.CharField(
        max_length=200,
        blank=True,
        help_text="A read-only tool of the same upstream run as this tool's dry run (before) and its "
        "verification (after). Empty: the upstream offers no dry run.",
    )
    preview_arguments = models.JSONField(
        default=dict,
        blank=True,
        help_text='Its arguments, each from one of the call\'s: {"<preview argument>": "<call argument>"}.',
    )

    class Meta:
        ordering = ["upstream", "remote_name"]
        constraints = [
            models.UniqueConstraint(fields=["upstream", "remote_name"], name="upstreamtool_unique_remote"),
        ]

    def __str__(self) -> str:
        return f"{self.upstream.name}/{self.remote_name}"

    def clean(self) -> None:
        """A preview mapping names preview arguments after call arguments, both plain names."""
        mapping = self.preview_arguments
        if not isinstance(mapping, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and re.fullmatch(r"[A-Za-z0-9_.-]+", v)
            for k, v in mapping.items()
        ):
            raise ValidationError({"preview_arguments": 'An object {"<preview argument>": "<call argument>"}.'})
