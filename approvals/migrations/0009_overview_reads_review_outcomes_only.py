"""A partial, covering index of the calls a person decided, rejected or let expire: the overview's figures.

The overview's decision sample and outcomes per tool read a window's decisions only;
without this index they walked every call of the window, the pending backlog first.
Pending and autonomous calls are not in it, so proposing a call never writes to it.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0008_call_trace_context"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="toolcall",
            index=models.Index(
                condition=models.Q(models.Q(("approvals_required__gt", 0), ("decided_at__isnull", False)))
                | models.Q(("status__in", ["rejected", "expired"])),
                fields=["created_at", "approvals_required", "decided_at", "status", "risk_tier", "tool"],
                name="toolcall_review_outcome",
            ),
        ),
    ]
