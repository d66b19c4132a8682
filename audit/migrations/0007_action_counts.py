"""Counts of the chain's events by action, folded now and then (audit.counts): /metrics reads them.

The first fold is made here, through the sealed head, so that no read after the
upgrade counts the whole chain.
"""

from django.db import migrations, models
from django.db.models import Count, Max


def first_fold(apps, schema_editor) -> None:
    Event, ActionCounts = apps.get_model("audit", "Event"), apps.get_model("audit", "ActionCounts")
    head = Event.objects.aggregate(head=Max("seq"))["head"]
    if head is None:
        return
    sealed = Event.objects.filter(seq__lte=head).values_list("action").annotate(n=Count("pk")).order_by()
    ActionCounts.objects.create(through_seq=head, by_action=dict(sealed))


class Migration(migrations.Migration):
    dependencies = [("audit", "0006_seal_once_triggers")]

    operations = [
        migrations.CreateModel(
            name="ActionCounts",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("through_seq", models.BigIntegerField(unique=True)),
                ("by_action", models.JSONField(default=dict)),
                ("folded_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={"verbose_name_plural": "action counts"},
        ),
        migrations.RunPython(first_fold, migrations.RunPython.noop),
    ]
