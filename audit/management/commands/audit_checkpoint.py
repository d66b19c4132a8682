"""Append a signed checkpoint of the audit chain's head to a file kept outside the database."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from audit.checkpoints import make_checkpoint
from audit.typealiases import OptionValue


class Command(BaseCommand):
    help = "Append a signed checkpoint (head seq + hash) to FILE; ship that file to write-once storage."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--out", default=str(settings.VAR_DIR / "audit-checkpoints.txt"))

    def handle(self, *args: str, **options: OptionValue) -> None:
        checkpoint = make_checkpoint()
        if checkpoint is None:
            self.stdout.write("audit log is empty: no checkpoint written")
            return
        path = Path(options["out"])
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as handle:
            handle.write(checkpoint + "\n")
        self.stdout.write(f"checkpoint appended to {path}")
