"""Idempotently load the demo: tiers, catalog and rules, downstream data, agents, reviewers.

A second run changes nothing a person relies on: agents keep their tokens and
reviewers their passwords (so a running demo agent, a copied token and open
sessions keep working) unless `--rotate-tokens` / `--reset-passwords` say otherwise.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction
from django.utils.module_loading import import_string

from agents.models import Agent, Grant, hash_token
from agents.provisioning import create_or_update_agent
from audit.typealiases import JSONObject, OptionValue
from demo import boxoffice
from demo.catalog import AGENTS, TIERS, TOOLS
from toolcatalog.models import RiskRule, RiskTier, Tool

REVIEWERS_GROUP = "Reviewers"
SENIOR_GROUP = "Senior reviewers"


def seed_tiers() -> dict[int, RiskTier]:
    """Create or update the four tiers."""
    tiers = {}
    for spec in TIERS:
        tier, _ = RiskTier.objects.update_or_create(
            level=spec["level"], defaults={k: v for k, v in spec.items() if k != "level"}
        )
        tiers[tier.level] = tier
    return tiers


def seed_tool(spec: JSONObject, tiers: dict[int, RiskTier]) -> Tool:
    """Create or update one demo tool and its rules (saving only what changed, so versions stay put)."""
    fields = {k: v for k, v in spec.items() if k not in {"name", "rules", "base_tier"}}
    fields.update(
        base_tier=tiers[spec["base_tier"]],
        executor_kind="gatehouse_protocol",
        executor_ref=f"/demo-services/tools/{spec['name']}",
    )
    tool = Tool.objects.filter(name=spec["name"]).first()
    if tool is None:
        tool = Tool.objects.create(name=spec["name"], **fields)
    elif any(getattr(tool, k) != v for k, v in fields.items()):
        for k, v in fields.items():
            setattr(tool, k, v)
        tool.save()
    for rule_spec in spec.get("rules", []):
        rule = RiskRule.objects.filter(tool=tool, name=rule_spec["name"]).first() or RiskRule(
            tool=tool, name=rule_spec["name"]
        )
        wanted = {
            "description": rule_spec["description"],
            "condition": rule_spec["condition"],
            "tier": tiers[rule_spec["tier"]],
        }
        if rule.pk is None or any(getattr(rule, k) != v for k, v in wanted.items()):
            for k, v in wanted.items():
                setattr(rule, k, v)
            rule.save()
    return tool


def seed_people(password: str, *, reset_passwords: bool) -> list[str]:
    """Create the reviewer groups and the accounts alice, bob (reviewers) and admin (superuser).

    Existing accounts keep their password unless `reset_passwords`: setting it again
    would log their open sessions out. Return the names whose password was set.
    """
    review = Permission.objects.get(codename="review_toolcall", content_type__app_label="approvals")
    browse_audit = Permission.objects.get(codename="browse_auditlog", content_type__app_label="audit")
    reviewers, _ = Group.objects.get_or_create(name=REVIEWERS_GROUP)
    seniors, _ = Group.objects.get_or_create(name=SENIOR_GROUP)
    for group in (reviewers, seniors):
        group.permissions.add(review, browse_audit)
    password_set = []
    for username, groups in (("alice", [reviewers, seniors]), ("bob", [reviewers, seniors]), ("admin", [reviewers])):
        user, created = get_user_model().objects.get_or_create(
            username=username, defaults={"email": f"{username}@example.com"}
        )
        if created or reset_passwords:
            user.set_password(password)
            password_set.append(username)
        if username == "admin":
            user.is_staff = user.is_superuser = True
        user.save()
        user.groups.add(*groups)
    RiskTier.objects.filter(level=2).update(approver_group=reviewers)
    RiskTier.objects.filter(level=3).update(approver_group=seniors)
    return password_set


def read_tokens(path: Path) -> dict[str, str]:
    """Return the tokens an earlier run wrote to `path` (none if it is missing or unreadable)."""
    try:
        tokens = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {name: token for name, token in tokens.items() if isinstance(token, str)} if isinstance(tokens, dict) else {}


def write_tokens(path: Path, tokens: dict[str, str]) -> None:
    """Write the tokens readable by their owner only, replacing the file in one step (readers never see half)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(tokens, indent=2) + "\n")
    partial.chmod(0o600)
    os.replace(partial, path)


def kept_token(name: str, grants: dict[str, int], known: str | None) -> str | None:
    """Return `known` if it is still the agent's token and the agent's grants are the demo's; else None.

    Only the token's hash is stored, so a token can be kept (and printed again) only
    when the tokens file still holds it. Changed grants go through provisioning, which audits them.
    """
    agent = Agent.objects.filter(name=name).first()
    if known is None or agent is None or agent.token_hash != hash_token(known):
        return None
    current = dict(Grant.objects.filter(agent=agent).values_list("tool__name", "max_tier"))
    return known if current == grants else None


def seed_agents(known: dict[str, str], *, rotate: bool) -> tuple[dict[str, str], list[str]]:
    """Create or update the demo agents; return every agent's token and the names given a new one."""
    tokens, issued = {}, []
    for name, (description, wanted) in AGENTS.items():
        # An upstream's tools exist once it synced: grant those there are (the next seed grants the rest).
        grants = {tool: tier for tool, tier in wanted.items() if Tool.objects.filter(name=tool).exists()}
        token = None if rotate else kept_token(name, grants, known.get(name))
        if token is None:
            _, token = create_or_update_agent(name, grants, owner_username="admin", description=description)
            issued.append(name)
        tokens[name] = token
    return tokens, issued


class Command(BaseCommand):
    help = (
        "Load the demo catalog, downstream data, agents and reviewers. Safe to run again: "
        "tokens and passwords are kept unless --rotate-tokens / --reset-passwords."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--password", default="gatehouse", help="Password of alice, bob and admin when created (or reset)."
        )
        parser.add_argument("--tokens-file", default=str(settings.VAR_DIR / "demo-tokens.json"))
        parser.add_argument("--rotate-tokens", action="store_true", help="Issue new tokens to every demo agent.")
        parser.add_argument("--reset-passwords", action="store_true", help="Set the password of existing accounts too.")

    def handle(self, *args: str, **options: OptionValue) -> None:
        path = Path(options["tokens_file"])
        with transaction.atomic():
            tiers = seed_tiers()
            for spec in TOOLS:
                seed_tool(spec, tiers)
            password_set = seed_people(options["password"], reset_passwords=options["reset_passwords"])
            import_string("demo.downstream.seed")()
            upstream = boxoffice.seed(tiers)  # before the agents: one of them is granted its tools
            tokens, issued = seed_agents(read_tokens(path), rotate=options["rotate_tokens"])
        write_tokens(path, tokens)  # after commit: the file never names a token the database does not hold
        self.report(options["password"], password_set, tokens, issued, path)
        self.stdout.write(upstream)

    def report(
        self, password: str, password_set: list[str], tokens: dict[str, str], issued: list[str], path: Path
    ) -> None:
        """Print the logins and every agent's token, saying which are new."""
        self.stdout.write(self.style.SUCCESS("Demo loaded. Reviewers: alice, bob; superuser: admin."))
        if password_set:
            self.stdout.write(f"Password of {', '.join(password_set)}: {password}")
        kept = [name for name in ("alice", "bob", "admin") if name not in password_set]
        if kept:
            self.stdout.write(f"Password of {', '.join(kept)} unchanged (--reset-passwords sets it).")
        for name, token in tokens.items():
            self.stdout.write(f"  {name:<18} {token}{'  (new)' if name in issued else ''}")
        self.stdout.write(f"Tokens also in {path}")
