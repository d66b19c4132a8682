"""Walk the audit hash chain; exit 0 if intact, 1 naming the first bad event."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from audit.chain import first_break
from audit.models import Event


class Command(BaseCommand):
    help = "Verify the audit log's hash chain. Exit status 0 means intact."

    def handle(self, *args: Any, **options: Any) -> None:
        broken = first_break()
        if broken is not None:
            raise CommandError(f"audit chain broken at event #{broken.seq}: {broken.reason}")
        count = Event.objects.count()
        self.stdout.write(self.style.SUCCESS(f"audit chain intact: {count} events"))
