# The proposal's W3C trace context on each call, so an execution a reviewer approved later continues the agent's trace.
# Constant defaults: PostgreSQL adds both columns without rewriting the table.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0007_standing_approvals"),
    ]

    operations = [
        migrations.AddField(
            model_name="toolcall",
            name="traceparent",
            field=models.CharField(blank=True, default="", editable=False, max_length=55),
        ),
        migrations.AddField(
            model_name="toolcall",
            name="tracestate",
            field=models.CharField(blank=True, default="", editable=False, max_length=512),
        ),
    ]
