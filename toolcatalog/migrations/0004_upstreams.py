# Upstream MCP servers, their headers/environment, and the link of each catalog tool to its upstream tool.

import django.core.validators
import django.db.models.deletion
from django.db import migrations, models

import vault.fields

NAME = django.core.validators.RegexValidator("^[A-Za-z0-9_-]{1,40}$", "1 to 40 letters, digits, _ and - only.")


class Migration(migrations.Migration):
    dependencies = [
        ("toolcatalog", "0003_http_tools"),
    ]

    operations = [
        migrations.CreateModel(
            name="Upstream",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=40, unique=True, validators=[NAME])),
                (
                    "prefix",
                    models.CharField(
                        blank=True,
                        help_text="Catalog tools are named <prefix>_<tool>. Empty: the upstream's name.",
                        max_length=40,
                        validators=[NAME],
                    ),
                ),
                (
                    "transport",
                    models.CharField(
                        choices=[
                            ("streamable_http", "Streamable HTTP (URL)"),
                            ("stdio", "stdio (a command the worker starts)"),
                        ],
                        default="streamable_http",
                        max_length=20,
                    ),
                ),
                (
                    "url",
                    models.URLField(blank=True, help_text="streamable_http: the MCP endpoint's URL.", max_length=500),
                ),
                (
                    "command",
                    models.CharField(
                        blank=True,
                        help_text="stdio: the command line that starts the server (shell-quoted).",
                        max_length=1000,
                    ),
                ),
                (
                    "enabled",
                    models.BooleanField(default=True, help_text="Disabled: not synced, and its calls are not sent."),
                ),
                (
                    "sync_status",
                    models.CharField(
                        choices=[
                            ("never", "never synced"),
                            ("ok", "synced"),
                            ("partial", "synced, some tools skipped"),
                            ("failed", "last sync failed"),
                        ],
                        default="never",
                        editable=False,
                        max_length=10,
                    ),
                ),
                ("synced_at", models.DateTimeField(blank=True, editable=False, null=True)),
                ("sync_message", models.TextField(blank=True, editable=False)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={"ordering": ["name"]},
        ),
        migrations.CreateModel(
            name="UpstreamTool",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("remote_name", models.CharField(help_text="The tool's name on its upstream.", max_length=200)),
                (
                    "definition",
                    models.JSONField(
                        default=dict,
                        editable=False,
                        help_text="title, description, inputSchema, annotations as last synced.",
                    ),
                ),
                (
                    "synced_tier",
                    models.PositiveSmallIntegerField(
                        editable=False,
                        help_text="The base tier the annotations gave; an admin's other choice is kept.",
                    ),
                ),
                (
                    "gone",
                    models.BooleanField(
                        default=False, editable=False, help_text="Absent from the upstream's last tools/list."
                    ),
                ),
                ("disabled_by_sync", models.BooleanField(default=False, editable=False)),
                (
                    "repeat_safe",
                    models.BooleanField(
                        default=False,
                        help_text="Safe to send again after an unanswered attempt (a read, or idempotent upstream). "
                        "MCP has no idempotency key: leave off for any write.",
                    ),
                ),
                (
                    "preview_tool",
                    models.CharField(
                        blank=True,
                        help_text="A read-only tool of the same upstream run as this tool's dry run (before) and its "
                        "verification (after). Empty: the upstream offers no dry run.",
                        max_length=200,
                    ),
                ),
                (
                    "preview_arguments",
                    models.JSONField(
                        blank=True,
                        default=dict,
                        help_text='Its arguments, each from one of the call\'s: {"<preview argument>": "<call argument>"}.',
                    ),
                ),
                (
                    "tool",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE, related_name="upstream_link", to="toolcatalog.tool"
                    ),
                ),
                (
                    "upstream",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT, related_name="tools", to="toolcatalog.upstream"
                    ),
                ),
            ],
            options={
                "ordering": ["upstream", "remote_name"],
                "constraints": [
                    models.UniqueConstraint(fields=("upstream", "remote_name"), name="upstreamtool_unique_remote")
                ],
            },
        ),
        migrations.CreateModel(
            name="UpstreamValue",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "kind",
                    models.CharField(
                        choices=[("header", "HTTP header"), ("env", "environment variable")], max_length=10
                    ),
                ),
                (
                    "name",
                    models.CharField(
                        max_length=100,
                        validators=[
                            django.core.validators.RegexValidator(
                                "^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$", "A header or variable name."
                            )
                        ],
                    ),
                ),
                (
                    "value",
                    vault.fields.EncryptedTextField(blank=True, help_text="Write-only: never shown again after save."),
                ),
                (
                    "upstream",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="values", to="toolcatalog.upstream"
                    ),
                ),
            ],
            options={
                "ordering": ["upstream", "kind", "name"],
                "constraints": [
                    models.UniqueConstraint(fields=("upstream", "kind", "name"), name="upstreamvalue_unique_name")
                ],
            },
        ),
    ]
