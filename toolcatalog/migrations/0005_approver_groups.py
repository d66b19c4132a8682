# Approver groups per tool and tier (toolcatalog.approvers).

import django.core.validators
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("toolcatalog", "0004_upstreams"),
    ]

    operations = [
        migrations.CreateModel(
            name="ApproverGroup",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "min_tier",
                    models.PositiveSmallIntegerField(
                        choices=[
                            (0, "0 — read"),
                            (1, "1 — reversible write"),
                            (2, "2 — irreversible write"),
                            (3, "3 — critical"),
                        ],
                        help_text="From this tier up; the highest threshold at or below a call's tier applies.",
                        validators=[django.core.validators.MaxValueValidator(3)],
                    ),
                ),
                (
                    "group",
                    models.ForeignKey(
                        help_text="Several groups at one threshold: several approvals come from different groups.",
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="auth.group",
                    ),
                ),
                (
                    "tool",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="approver_groups",
                        to="toolcatalog.tool",
                    ),
                ),
            ],
            options={
                "ordering": ["tool", "min_tier", "group__name"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("tool", "min_tier", "group"), name="approvergroup_unique_per_tool_tier"
                    )
                ],
            },
        ),
    ]
