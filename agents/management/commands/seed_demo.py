"""`seed_demo` where the demo is off: say how to turn it on, and fail.

The demo's own seed_demo (demo/management/commands) comes with the demo app, which is
installed only when GATEHOUSE_DEMO=1; it is listed before this app, so this stand-in
runs only when the demo is not installed.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from audit.typealiases import OptionValue

DEMO_OFF = "The demo is not installed: set GATEHOUSE_DEMO=1 (as `make demo` does) and run seed_demo again."


class Command(BaseCommand):
    help = "Load the demo (only when GATEHOUSE_DEMO=1; here it only says so)."

    def run_from_argv(self, argv: list[str]) -> None:
        """Ignore the demo command's options (--password, --tokens-file): the answer is the same line."""
        super().run_from_argv(argv[:2])

    def handle(self, *args: str, **options: OptionValue) -> None:
        raise CommandError(DEMO_OFF)
