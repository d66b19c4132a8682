"""`upstream add | sync | list`: put Gatehouse in front of an MCP server from the shell.

    upstream add NAME (--url URL [--header "K: V"]… | --command "CMD ARG…" [--env K=V]…) [--prefix P] [--sync]
    upstream sync NAME [--json]
    upstream list [--json]

Any failure (unreachable, not MCP, bad auth, timeout, bad input) exits non-zero
with one line saying what went wrong; header and variable values are never printed.
"""

from __future__ import annotations

import json

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit.models import ActorKind
from audit.typealiases import OptionValue
from toolcatalog.upstreams import Upstream
from toolcatalog.upstreams_client import UpstreamError
from toolcatalog.upstreams_sync import SyncReport, add_upstream, describe, sync

ACTOR = (ActorKind.ADMIN, "manage.py upstream")


def parse_pairs(items: list[str], separator: str, option: str) -> dict[str, str]:
    """Parse repeated `K<sep>V` options into a dict (values may contain the separator)."""
    pairs: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition(separator)
        if not sep or not key.strip():
            raise CommandError(f"{option}: expected NAME{separator.strip()}VALUE, got an entry without it")
        pairs[key.strip()] = value.strip() if separator == ":" else value
    return pairs


def one_line(error: ValidationError) -> str:
    """Return a validation error as one line: `field: message; …`."""
    if hasattr(error, "error_dict"):
        return "; ".join(f"{k}: {' '.join(m for e in v for m in e.messages)}" for k, v in error.error_dict.items())
    return " ".join(error.messages)


class Command(BaseCommand):
    help = "Register, sync and list upstream MCP servers whose tools Gatehouse governs."

    def add_arguments(self, parser: CommandParser) -> None:
        verbs = parser.add_subparsers(dest="verb", required=True)
        add = verbs.add_parser("add", help="Register an upstream MCP server.")
        add.add_argument("name")
        where = add.add_mutually_exclusive_group(required=True)
        where.add_argument("--url", help="Streamable HTTP endpoint of the server.")
        where.add_argument("--command", help='stdio: the command line that starts it, e.g. "npx -y server-x".')
        add.add_argument("--header", action="append", default=[], metavar='"K: V"')
        add.add_argument("--env", action="append", default=[], metavar="K=V")
        add.add_argument("--prefix", default="", help="Catalog tools are named <prefix>_<tool> (default: NAME).")
        add.add_argument("--sync", action="store_true", help="Sync its tools right away.")
        sync_verb = verbs.add_parser("sync", help="Sync an upstream's tools into the catalog.")
        sync_verb.add_argument("name")
        sync_verb.add_argument("--json", action="store_true")
        listing = verbs.add_parser("list", help="List upstreams.")
        listing.add_argument("--json", action="store_true")

    def handle(self, *args: str, **options: OptionValue) -> None:
        verb = options["verb"]
        if verb == "add":
            self.add(options)
        elif verb == "sync":
            self.sync(self.upstream(options["name"]), as_json=options["json"])
        else:
            self.list(as_json=options["json"])

    def upstream(self, name: str) -> Upstream:
        found = Upstream.objects.filter(name=name).first()
        if found is None:
            raise CommandError(f"no upstream named {name!r} (see: manage.py upstream list)")
        return found

    def add(self, options: dict[str, OptionValue]) -> None:
        if options["header"] and not options["url"]:
            raise CommandError("--header goes with --url (a stdio server takes --env)")
        if options["env"] and not options["command"]:
            raise CommandError("--env goes with --command (an HTTP server takes --header)")
        if Upstream.objects.filter(name=options["name"]).exists():
            raise CommandError(f"an upstream named {options['name']!r} exists already")
        try:
            upstream = add_upstream(
                options["name"],
                url=options["url"] or "",
                headers=parse_pairs(options["header"], ":", "--header"),
                command=options["command"] or "",
                env=parse_pairs(options["env"], "=", "--env"),
                prefix=options["prefix"],
                actor=ACTOR,
            )
        except ValidationError as exc:
            raise CommandError(f"upstream {options['name']!r} not added: {one_line(exc)}") from None
        self.stdout.write(f"Upstream {upstream.name} added ({upstream.transport}, {upstream.where()}).")
        if options["sync"]:
            self.sync(upstream, as_json=False)

    def sync(self, upstream: Upstream, *, as_json: bool) -> None:
        try:
            report = sync(upstream, ACTOR)
        except UpstreamError as error:
            raise CommandError(f"sync of {upstream.name} failed ({error.code}): {error}") from None
        if as_json:
            self.stdout.write(json.dumps(report.as_json(), ensure_ascii=False))
            return
        self.stdout.write(summary(report))

    def list(self, *, as_json: bool) -> None:
        upstreams = [describe(u) for u in Upstream.objects.all()]
        if as_json:
            self.stdout.write(json.dumps(upstreams, ensure_ascii=False))
            return
        for u in upstreams:
            state = "enabled" if u["enabled"] else "disabled"
            self.stdout.write(
                f"{u['name']}\t{u['transport']}\t{u['where']}\t{state}\t{u['sync_status']}\t"
                f"{u['synced_at'] or '-'}\t{len(u['tools'])} tool(s)"
            )


def summary(report: SyncReport) -> str:
    """Return what a sync did, one line per change."""
    lines = [
        f"Synced {report.upstream}: {len(report.added)} added, {len(report.changed)} changed, "
        f"{len(report.disabled)} disabled, {len(report.enabled)} enabled again, {len(report.skipped)} skipped."
    ]
    lines += [f"  + {name}" for name in report.added]
    lines += [f"  ~ {name}" for name in report.changed]
    lines += [f"  - {name} (disabled: gone upstream)" for name in report.disabled]
    lines += [f"  + {name} (enabled again)" for name in report.enabled]
    lines += [f"  ! {s['tool']}: skipped, {s['reason']}" for s in report.skipped]
    return "\n".join(lines)
