"""Routing starts at the audit chain's head: events recorded before notifications existed are not sent."""

from django.db import migrations
from django.db.models import Max


def start_at_the_head(apps, schema_editor):
    Event = apps.get_model("audit", "Event")
    Cursor = apps.get_model("notifications", "Cursor")
    head = Event.objects.aggregate(head=Max("seq"))["head"] or 0
    Cursor.objects.create(last_seq=head)


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0004_browse_auditlog_permission"),
        ("notifications", "0001_initial"),
    ]

    operations = [migrations.RunPython(start_at_the_head, migrations.RunPython.noop)]
