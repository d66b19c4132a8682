"""Idempotently load the demo: tiers, catalog and rules, downstream data, agents, reviewers."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction
from django.utils.module_loading import import_string

from agents.provisioning import create_or_update_agent
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


def seed_tool(spec: dict[str, Any], tiers: dict[int, RiskTier]) -> Tool:
    """Create or update one demo tool and its rules (saving only what changed, so versions stay put)."""
    fields = {k: v for k, v in spec.items() if k not in {"name", "rules", "base_tier"}}
    fields.update(
        base_tier=tiers[spec["base_tier"]], executor_kind="http", executor_ref=f"/demo-services/tools/{spec['name']}"
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


def seed_people(password: str) -> None:
    """Create the reviewer groups and the accounts alice, bob (reviewers) and admin (superuser)."""
    perm = Permission.objects.get(codename="review_toolcall", content_type__app_label="approvals")
    reviewers, _ = Group.objects.get_or_create(name=REVIEWERS_GROUP)
    seniors, _ = Group.objects.get_or_create(name=SENIOR_GROUP)
    for group in (reviewers, seniors):
        group.permissions.add(perm)
    User = get_user_model()
    for username in ("alice", "bob"):
        user = User.objects.filter(username=username).first() or User(
            username=username, email=f"{username}@example.com"
        )
        user.set_password(password)
        user.save()
        user.groups.add(reviewers, seniors)
    admin = User.objects.filter(username="admin").first() or User(username="admin", email="admin@example.com")
    admin.is_staff = admin.is_superuser = True
    admin.set_password(password)
    admin.save()
    admin.groups.add(reviewers)
    RiskTier.objects.filter(level=2).update(approver_group=reviewers)
    RiskTier.objects.filter(level=3).update(approver_group=seniors)


class Command(BaseCommand):
    help = "Load the demo catalog, downstream data, agents and reviewers. Safe to run again."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--password", default="gatehouse", help="Password for alice, bob and admin.")
        parser.add_argument("--tokens-file", default=str(settings.VAR_DIR / "demo-tokens.json"))

    @transaction.atomic
    def handle(self, *args: Any, **options: Any) -> None:
        tiers = seed_tiers()
        for spec in TOOLS:
            seed_tool(spec, tiers)
        seed_people(options["password"])
        import_string("demo.downstream.seed")()
        tokens = {}
        for name, (description, grants) in AGENTS.items():
            _, tokens[name] = create_or_update_agent(name, grants, owner_username="admin", description=description)
        path = options["tokens_file"]
        settings.VAR_DIR.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as handle:
            json.dump(tokens, handle, indent=2)
        self.stdout.write(self.style.SUCCESS("Demo loaded. Reviewers: alice, bob; superuser: admin."))
        self.stdout.write(f"Password for all three: {options['password']}")
        for name, token in tokens.items():
            self.stdout.write(f"  {name:<18} {token}")
        self.stdout.write(f"Tokens also written to {path}")
