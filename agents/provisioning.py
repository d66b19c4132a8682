"""Creating agents and their grants (shared by create_agent, seed_demo and admin)."""

from __future__ import annotations

from collections.abc import Mapping

from django.contrib.auth import get_user_model
from django.db import transaction

from agents.models import Agent, Grant
from audit.chain import record
from audit.models import ActorKind
from toolcatalog.models import Tool


@transaction.atomic
def create_or_update_agent(
    name: str,
    grants: Mapping[str, int],
    *,
    owner_username: str | None = None,
    description: str = "",
    actor: tuple[str, str] = (ActorKind.SYSTEM, "manage.py"),
) -> tuple[Agent, str]:
    """Create the agent (or update an existing one), set its grants, issue a fresh token.

    Returns the agent and its token; only the token's hash is stored.
    """
    owner = get_user_model().objects.get(username=owner_username) if owner_username else None
    agent = Agent.objects.filter(name=name).first() or Agent(name=name)
    agent.description = description or agent.description
    agent.owner = owner if owner_username else agent.owner
    token = agent.set_new_token()
    agent.save()
    tools = {tool.name: tool for tool in Tool.objects.filter(name__in=list(grants))}
    missing = sorted(set(grants) - set(tools))
    if missing:
        raise ValueError(f"unknown tool(s): {', '.join(missing)}")
    for tool_name, max_tier in grants.items():
        Grant.objects.update_or_create(agent=agent, tool=tools[tool_name], defaults={"max_tier": max_tier})
    record(
        "agent.token_issued",
        actor=actor,
        agent_name=agent.name,
        data={"grants": dict(grants), "owner": owner_username, "token_hint": agent.token_hint},
    )
    return agent, token
