"""`python manage.py audit_sequencer`: seal committed audit events into the chain, until SIGTERM.

Run one or more (one per machine is fine): one leads and seals, the others wait to
take over (audit/sequencer.py). An event waits at most about a second to be sealed
while one runs.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

from django.core.management.base import BaseCommand, CommandParser

from audit import sequencer
from audit.typealiases import OptionValue


class Command(BaseCommand):
    help = "Seal committed audit events into the hash chain, in batches, until stopped (SIGTERM or Ctrl-C)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--batch", type=int, default=sequencer.BATCH, help="Events sealed per transaction.")

    def handle(self, *args: str, **options: OptionValue) -> None:
        stop = threading.Event()

        def stop_on(signum: int, frame: FrameType | None) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, stop_on)
        signal.signal(signal.SIGINT, stop_on)
        self.stdout.write("audit sequencer started")
        self.stdout.flush()
        sequencer.run(stop, batch=options["batch"])
        self.stdout.write("audit sequencer stopped")
