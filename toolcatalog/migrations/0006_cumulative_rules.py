# Cumulative limits: a rule over a window of a tool's calls, and the row proposals under one limit lock;
# whether tier 3 allows standing approvals.

import datetime

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("toolcatalog", "0005_approver_groups"),
    ]

    operations = [
        migrations.AddField(
            model_name="risktier",
            name="allows_standing_approvals",
            field=models.BooleanField(
                default=False,
                help_text="Tier 3 only: reviewers may approve calls like one they approve, for a while (standing "
                "approvals). Lower tiers always may; a standing approval takes this tier's approvals.",
            ),
        ),
        migrations.CreateModel(
            name="CumulativeRule",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=100)),
                ("description", models.TextField(blank=True)),
                (
                    "sum_argument",
                    models.CharField(
                        blank=True,
                        help_text="The numeric argument whose values are added up, e.g. valor_centavos. "
                        "Empty: count the calls.",
                        max_length=100,
                    ),
                ),
                (
                    "per",
                    models.CharField(
                        choices=[
                            ("agent", "Per agent"),
                            ("resource", "Per resource (the tool's resource argument)"),
                            ("tool", "The whole tool"),
                        ],
                        default="agent",
                        max_length=16,
                    ),
                ),
                ("window", models.DurationField(help_text="How far back the total reaches, e.g. 24:00:00 for a day.")),
                (
                    "over",
                    models.PositiveBigIntegerField(
                        help_text="A call that takes the window's total above this is raised to the rule's tier."
                    ),
                ),
                ("enabled", models.BooleanField(default=True)),
                (
                    "tier",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT, related_name="+", to="toolcatalog.risktier"
                    ),
                ),
                (
                    "tool",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="cumulative_rules",
                        to="toolcatalog.tool",
                    ),
                ),
            ],
            options={"ordering": ["tool", "name"]},
        ),
        migrations.CreateModel(
            name="CumulativeLock",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("key", models.CharField(max_length=100)),
                (
                    "rule",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="toolcatalog.cumulativerule"
                    ),
                ),
            ],
        ),
        migrations.AddConstraint(
            model_name="cumulativerule",
            constraint=models.UniqueConstraint(fields=("tool", "name"), name="cumulativerule_unique_name_per_tool"),
        ),
        migrations.AddConstraint(
            model_name="cumulativerule",
            constraint=models.CheckConstraint(
                condition=models.Q(("window__gt", datetime.timedelta(0))), name="cumulativerule_window_positive"
            ),
        ),
        migrations.AddConstraint(
            model_name="cumulativelock",
            constraint=models.UniqueConstraint(fields=("rule", "key"), name="cumulativelock_unique_key_per_rule"),
        ),
    ]
