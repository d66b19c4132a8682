"""`manage.py policy_whatif TOOL [--days N] [--rules FILE]`: the admin's policy what-if, from a shell."""

from __future__ import annotations

import json
from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from approvals.whatif import replay, stored_calls
from audit.typealiases import OptionValue
from toolcatalog.models import Tool
from toolcatalog.policies import policy_for, tier_specs
from toolcatalog.policy import compile_policy
from toolcatalog.schemacheck import schema_problems


class Command(BaseCommand):
    help = "Replay a tool's recent calls against its current rules (or rules from a JSON file); print what changes."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tool")
        parser.add_argument("--days", type=int, default=30)
        parser.add_argument("--rules", help='A JSON file: [{"name", "tier", "condition", "description"?}, …]')

    def handle(self, *args: str, **options: OptionValue) -> None:
        tool = Tool.objects.select_related("base_tier").filter(name=options["tool"]).first()
        if tool is None:
            raise CommandError(f"No tool named {options['tool']!r}.")
        tiers = tier_specs()
        policy = policy_for(tool, tiers)
        if options["rules"]:
            with open(options["rules"]) as handle:
                rules = json.load(handle)
            for rule in rules:
                if problems := schema_problems(rule.get("condition")):
                    raise CommandError(f"rule {rule.get('name')!r}: {'; '.join(problems)}")
            specs = [(r["name"], r.get("description", ""), r["tier"], r["condition"]) for r in rules]
            policy = compile_policy(
                name=tool.name,
                version=tool.version,
                base_tier=tool.base_tier.level,
                input_schema=tool.input_schema,
                rules=specs,
                tiers=tiers,
            )
        report = replay(policy, stored_calls(tool.pk, timezone.now() - timedelta(days=options["days"])))
        self.stdout.write(
            f"{report.total} calls replayed in {report.seconds:.2f} s; {report.changed_count} would change"
        )
        for tier, before, after in report.tier_rows():
            self.stdout.write(f"  tier {tier!s:>4}: {before:>8} → {after}")
        for outcome, before, after in report.outcome_rows():
            self.stdout.write(f"  {outcome:<22} {before:>8} → {after}")
