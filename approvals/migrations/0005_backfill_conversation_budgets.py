"""Start each conversation's budget counter at the calls it already had accepted.

Conversation budgets used to be counted from the calls table at every proposal;
they are now counters spent with the insert (agents.budgets). Without this, every
conversation in flight at the upgrade would get its whole budget again. Refused
proposals never spent a budget, so they are not counted. The per-agent window
starts empty: it did not exist before.
"""

from django.db import migrations
from django.db.models import Count

BATCH = 2000


def count_conversations(apps, schema_editor):
    ToolCall = apps.get_model("approvals", "ToolCall")
    BudgetCounter = apps.get_model("agents", "BudgetCounter")
    rows = (
        ToolCall.objects.exclude(conversation_id="")
        .exclude(status="refused")
        .values("agent_id", "conversation_id")
        .annotate(used=Count("id"))
        .order_by()
    )
    batch = []
    for row in rows.iterator(chunk_size=BATCH):
        batch.append(
            BudgetCounter(agent_id=row["agent_id"], scope="conversation", key=row["conversation_id"], used=row["used"])
        )
        if len(batch) == BATCH:
            BudgetCounter.objects.bulk_create(batch, ignore_conflicts=True)
            batch = []
    BudgetCounter.objects.bulk_create(batch, ignore_conflicts=True)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0004_vacuum_calls_often"),
        ("agents", "0002_budget_counters_and_any_kind_breaker"),
    ]

    operations = [migrations.RunPython(count_conversations, migrations.RunPython.noop, elidable=True)]
