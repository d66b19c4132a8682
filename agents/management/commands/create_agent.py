"""Create an agent with grants and print its token once."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.provisioning import create_or_update_agent
from audit.typealiases import OptionValue


def parse_grant(text: str) -> tuple[str, int]:
    """Parse TOOL=MAX_TIER."""
    tool, sep, tier = text.partition("=")
    if not sep or not tool or tier not in {"0", "1", "2", "3"}:
        raise CommandError(f"--grant {text!r}: expected TOOL=MAX_TIER with MAX_TIER 0–3")
    return tool, int(tier)


class Command(BaseCommand):
    help = "Create (or re-issue) an agent with grants; prints its bearer token once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--owner", help="Username of the person responsible for the agent.")
        parser.add_argument("--grant", action="append", default=[], metavar="TOOL=MAX_TIER")
        parser.add_argument("--json", action="store_true", help='Print {"name", "token"} as JSON.')

    def handle(self, *args: str, **options: OptionValue) -> None:
        grants = dict(parse_grant(item) for item in options["grant"])
        try:
            agent, token = create_or_update_agent(options["name"], grants, owner_username=options["owner"])
        except Exception as exc:  # an unknown tool or owner: say so plainly
            raise CommandError(str(exc)) from exc
        if options["json"]:
            self.stdout.write(json.dumps({"name": agent.name, "token": token}))
        else:
            self.stdout.write(f"Agent {agent.name!r} created. Its token (shown once):\n{token}")
