# Standing approvals: calls like one a reviewer approved, approved on their own for a while (issue 25, item 2).

import uuid

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0003_budgetcounter_cap"),
        ("approvals", "0006_on_behalf_of"),
        ("toolcatalog", "0006_cumulative_rules"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="StandingApproval",
            fields=[
                ("id", models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                (
                    "tool_version",
                    models.PositiveIntegerField(
                        help_text="The tool version it was given under; another is not covered."
                    ),
                ),
                ("risk_tier", models.PositiveSmallIntegerField(help_text="The highest tier of call it covers.")),
                ("condition", models.JSONField(help_text="A JSON Schema the arguments of a covered call match.")),
                ("max_uses", models.PositiveIntegerField()),
                ("uses", models.PositiveIntegerField(default=0)),
                ("approvals_required", models.PositiveSmallIntegerField(default=1)),
                ("created_by_name", models.CharField(max_length=150)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("activated_at", models.DateTimeField(blank=True, null=True)),
                ("expires_at", models.DateTimeField()),
                ("revoked_at", models.DateTimeField(blank=True, null=True)),
                ("revoked_by_name", models.CharField(blank=True, max_length=150)),
                (
                    "agent",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="standing_approvals",
                        to="agents.agent",
                    ),
                ),
                (
                    "source_call",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="approvals.toolcall",
                    ),
                ),
                (
                    "tool",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="standing_approvals",
                        to="toolcatalog.tool",
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at"],
            },
        ),
        migrations.CreateModel(
            name="StandingApprover",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("reviewer_name", models.CharField(max_length=150)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "reviewer",
                    models.ForeignKey(
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "standing",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="approvers",
                        to="approvals.standingapproval",
                    ),
                ),
            ],
            options={
                "ordering": ["created_at"],
            },
        ),
        migrations.AddIndex(
            model_name="standingapproval",
            index=models.Index(fields=["agent", "tool", "expires_at"], name="standing_for_agent_tool"),
        ),
        migrations.AddConstraint(
            model_name="standingapproval",
            constraint=models.CheckConstraint(
                condition=models.Q(("uses__lte", models.F("max_uses"))), name="standing_uses_within_max"
            ),
        ),
        migrations.AddConstraint(
            model_name="standingapprover",
            constraint=models.UniqueConstraint(
                fields=("standing", "reviewer_name"), name="standing_one_approval_per_reviewer"
            ),
        ),
    ]
