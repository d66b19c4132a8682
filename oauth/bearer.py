"""An OAuth access token at `/mcp`: the agent it acts as, the person behind it, or why it is refused.

RFC 6750 §3 and the MCP authorization specification: a missing or bad token is 401 and
a token without the `mcp` scope 403, each with a `WWW-Authenticate: Bearer` challenge
naming the protected-resource metadata (RFC 9728 §5.1), where a client discovers how to
get a good one. A token is good for `/mcp` only when it was issued for this resource
(RFC 8707: its `resource` lists it) — a token meant for another service is refused
here even if this server issued it.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import User
from django.utils import timezone
from oauth2_provider.oauth2_validators import OAuth2Validator

from agents.models import Agent
from oauth.models import ClientAgent

MCP_SCOPE = "mcp"
METADATA_PATH = "/.well-known/oauth-protected-resource/mcp"


@dataclass(frozen=True)
class Caller:
    """Who calls: the agent, and the person it acts for (with an OAuth token: the one who consented)."""

    agent: Agent
    user: User | None
    client_id: str


@dataclass(frozen=True)
class Refusal:
    """Why a bearer token is refused, as RFC 6750 names it."""

    status: int
    error: str
    description: str


def authenticate(token: str, resource: str) -> Caller | Refusal:
    """Return the caller a valid access token for `resource` stands for, or the refusal."""
    access = OAuth2Validator()._load_access_token(token) if token else None
    if access is None or access.user is None or access.application is None:
        return Refusal(401, "invalid_token", "The access token is unknown or was revoked.")
    if access.expires <= timezone.now():
        return Refusal(401, "invalid_token", "The access token has expired; refresh it.")
    if resource not in (access.resource or []):
        return Refusal(401, "invalid_token", f"The access token was not issued for {resource}.")
    if MCP_SCOPE not in access.scope.split():
        return Refusal(403, "insufficient_scope", f"The access token lacks the '{MCP_SCOPE}' scope.")
    binding = ClientAgent.objects.select_related("agent").filter(application=access.application, user=access.user)
    chosen = binding.first()
    if chosen is None or not chosen.agent.active or chosen.agent.owner_id != access.user.pk:
        return Refusal(401, "invalid_token", "The agent this client acted as is gone; authorize it again.")
    chosen.agent.touch()
    return Caller(agent=chosen.agent, user=access.user, client_id=access.application.client_id)


def challenge(site: str, refusal: Refusal | None = None) -> str:
    """Return the WWW-Authenticate value: where the metadata is and, for a refused token, why."""
    parts = [f'Bearer realm="gatehouse", resource_metadata="{site}{METADATA_PATH}"']
    if refusal is not None:
        parts.append(f'error="{refusal.error}"')
        parts.append(f'error_description="{refusal.description}"')
        if refusal.error == "insufficient_scope":
            parts.append(f'scope="{MCP_SCOPE}"')
    return ", ".join(parts)
