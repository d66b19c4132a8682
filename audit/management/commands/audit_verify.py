"""Walk the audit hash chain; exit 0 if intact, 1 naming the first bad event."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit.chain import first_break
from audit.checkpoints import checkpoint_problems
from audit.models import Event
from audit.typealiases import OptionValue


class Command(BaseCommand):
    help = "Verify the audit log's hash chain (and, optionally, signed checkpoints). Exit 0 means intact."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--checkpoints", help="A file of signed checkpoints written by audit_checkpoint.")

    def handle(self, *args: str, **options: OptionValue) -> None:
        started = time.perf_counter()
        count = Event.objects.count()
        # A million events take seconds: say what is being walked before the walk starts.
        self.stdout.write(f"Verifying the audit chain: {count:,} events…")
        broken = first_break()
        if broken is not None:
            raise CommandError(f"audit chain broken at event #{broken.seq}: {broken.reason}")
        if options["checkpoints"]:
            with open(options["checkpoints"]) as handle:
                problems = checkpoint_problems(handle)
            if problems:
                raise CommandError("audit checkpoints do not match: " + "; ".join(problems))
        elapsed = time.perf_counter() - started
        rate = f", {count / elapsed:,.0f} events/s" if elapsed and count else ""
        self.stdout.write(self.style.SUCCESS(f"audit chain intact: {count} events in {elapsed:.2f} s{rate}"))
