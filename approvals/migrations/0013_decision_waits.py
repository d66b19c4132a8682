"""How long decided calls waited, folded now and then (approvals.decision_waits): /metrics reads it.

The first fold is made here, through the sealed head, so that no scrape after the
upgrade reads every decision the chain holds. It reads the chain in spans of seqs, so
that it never holds many decisions at once.
"""

from bisect import bisect_left

from django.db import migrations, models
from django.db.models import Max

DECISIONS = ("call.approved", "call.rejected")
BUCKETS = (60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 24 * 3600.0)
SPAN = 20_000  # decisions per span stay within SQLite's limit on bound parameters


def first_fold(apps, schema_editor) -> None:
    Event, ToolCall = apps.get_model("audit", "Event"), apps.get_model("approvals", "ToolCall")
    head = Event.objects.aggregate(head=Max("seq"))["head"]
    if head is None:
        return
    counts, seconds = [0] * (len(BUCKETS) + 1), 0.0
    for start in range(0, head, SPAN):
        decided = Event.objects.filter(seq__gt=start, seq__lte=min(start + SPAN, head), action__in=DECISIONS)
        pairs = list(decided.exclude(call_id=None).values_list("call_id", "created_at"))
        proposed = dict(ToolCall.objects.filter(pk__in=[call_id for call_id, _ in pairs]).values_list("pk", "created_at"))
        for call_id, at in pairs:
            if call_id in proposed:
                waited = (at - proposed[call_id]).total_seconds()
                counts[bisect_left(BUCKETS, waited)] += 1
                seconds += waited
    apps.get_model("approvals", "DecisionWaits").objects.create(through_seq=head, counts=counts, waited_seconds=seconds)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0012_tally_on_postgresql_only"),
        ("audit", "0007_action_counts"),
    ]

    operations = [
        migrations.CreateModel(
            name="DecisionWaits",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("through_seq", models.BigIntegerField(unique=True)),
                ("counts", models.JSONField(default=list)),
                ("waited_seconds", models.FloatField(default=0.0)),
                ("folded_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={"verbose_name_plural": "decision waits"},
        ),
        migrations.RunPython(first_fold, migrations.RunPython.noop),
    ]
