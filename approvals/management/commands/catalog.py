"""`catalog export | apply`: the catalog's policy as a file teams keep in git and review like code.

    catalog export [--format yaml|json] [--tool NAME]… [--out FILE]
    catalog apply FILE [--plan] [--days N]

`export` writes the tiers and every tool's tier, switch, rules (arguments and
cumulative) and approver groups. `apply` makes the tiers and tools the file lists
match it, in one transaction audited as one change (`catalog.applied`); what the file
does not list is left as it is. `--plan` prints the difference and, where the judging
of calls changes, the what-if over the last N days (30), and changes nothing. A file
with any problem is refused whole: every problem is printed and nothing changes.
"""

from __future__ import annotations

import getpass
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from approvals.policyfile import Catalog, PolicyFileError, load, read_catalog, render
from approvals.policyparse import parse
from approvals.policyplan import Change, apply, differences, whatif
from approvals.whatif import WhatIfReport
from audit.models import ActorKind
from audit.typealiases import OptionValue

LISTED = 50  # changed calls a plan prints per tool


class Command(BaseCommand):
    help = "Export the catalog's policy as YAML or JSON, or make the catalog match such a file (--plan: show only)."

    def add_arguments(self, parser: CommandParser) -> None:
        verbs = parser.add_subparsers(dest="verb", required=True)
        export = verbs.add_parser("export", help="Write the tiers and tools' policy.")
        export.add_argument("--format", choices=["yaml", "json"], default="yaml")
        export.add_argument("--tool", action="append", help="Only this tool (repeatable); tiers are always written.")
        export.add_argument("--out", help="Write to this file instead of standard output.")
        apply_verb = verbs.add_parser("apply", help="Make the catalog match a policy file.")
        apply_verb.add_argument("file")
        apply_verb.add_argument("--plan", action="store_true", help="Print what would change; change nothing.")
        apply_verb.add_argument("--days", type=int, default=30, help="How far back the plan's what-if replays.")

    def handle(self, *args: str, **options: OptionValue) -> None:
        if options["verb"] == "export":
            self.export(options["format"], options["tool"], options["out"])
        else:
            self.apply(Path(options["file"]), plan=options["plan"], days=options["days"])

    def export(self, file_format: str, tools: list[str] | None, out: str | None) -> None:
        text = render(read_catalog(tools), file_format)
        if out:
            Path(out).write_text(text, encoding="utf-8")
        else:
            self.stdout.write(text, ending="")

    def apply(self, path: Path, *, plan: bool, days: int) -> None:
        try:
            wanted = parse(load(path.read_text(encoding="utf-8")))
        except OSError as error:
            raise CommandError(f"Cannot read {path}: {error.strerror}") from error
        except PolicyFileError as refused:
            for problem in refused.problems:
                self.stderr.write(f"  {problem}")
            raise CommandError(f"{path} refused, nothing changed: {len(refused.problems)} problem(s).") from refused
        if plan:
            self.plan(path, differences(read_catalog([tool.name for tool in wanted.tools]), wanted), wanted, days)
            return
        changes = apply(wanted, (ActorKind.ADMIN, f"manage.py catalog apply ({getpass.getuser()})"))
        if not changes:
            self.stdout.write(f"No changes: the catalog already matches {path}.")
            return
        self.stdout.write(f"Applied {len(changes)} change(s) from {path} as one audited change:")
        self.write_changes(changes)

    def plan(self, path: Path, changes: list[Change], wanted: Catalog, days: int) -> None:
        if not changes:
            self.stdout.write(f"No changes: the catalog already matches {path}.")
            return
        self.stdout.write(f"Plan: {len(changes)} change(s); --plan changes nothing.")
        self.write_changes(changes)
        for name, report in whatif(changes, wanted, days):
            self.write_whatif(name, report, days)

    def write_changes(self, changes: list[Change]) -> None:
        for change in changes:
            self.stdout.write(f"  {change}")

    def write_whatif(self, name: str, report: WhatIfReport, days: int) -> None:
        self.stdout.write(
            f"What-if for {name} over the last {days} days: {report.total} call(s) replayed, "
            f"{report.changed_count} would be judged differently."
        )
        for tier, before, after in report.tier_rows():
            self.stdout.write(f"  tier {tier!s:>4}: {before:>6} → {after}")
        for outcome, before, after in report.outcome_rows():
            self.stdout.write(f"  {outcome:<22} {before:>6} → {after}")
        for call in report.changed[:LISTED]:
            rules = f" ({', '.join(call.rules_after)})" if call.rules_after else ""
            self.stdout.write(
                f"  {call.created_at:%Y-%m-%d %H:%M} {call.call_id} {call.agent_name}: tier {call.tier_before} → "
                f"{call.tier_after}, {call.outcome_before} → {call.outcome_after}{rules}"
            )
        if report.changed_count > LISTED:
            self.stdout.write(f"  … and {report.changed_count - LISTED} more")
