"""Which agent an OAuth client acts as, for the person who let it in."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from oauth2_provider.models import Application

from agents.models import Agent
from toolcatalog.models import Tool


class ClientAgent(models.Model):
    """A person's consent: this client (an MCP host) acts as this one of their agents, on their behalf.

    One row per client and person, so refreshed tokens keep acting as the agent chosen;
    consenting again replaces the choice, and revoking deletes the row with the tokens.
    """

    application = models.ForeignKey(Application, on_delete=models.CASCADE, related_name="gatehouse_agents")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="oauth_clients")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="oauth_clients")
    consented_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["application", "user"], name="one_agent_per_client_and_person")]
        ordering = ["-consented_at"]

    def __str__(self) -> str:
        return f"{self.application.name or self.application.client_id} as {self.agent.name} for {self.user}"


class AgentTemplate(models.Model):
    """An agent a person may create for themselves on the consent page, with the grants an admin chose.

    The agent is named `<name>-<username>` and owned by that person, so its calls are
    theirs: they cannot approve them, and other reviewers see whose they are.
    """

    name = models.SlugField(max_length=100, unique=True, help_text="New agents are named '<name>-<username>'.")
    description = models.TextField(blank=True)
    grants = models.JSONField(default=dict, help_text='The new agent\'s grants: {"tool name": max tier (0–3), …}.')

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        problem = grants_problem(self.grants)
        if problem:
            raise ValidationError({"grants": problem})


def grants_problem(grants: object) -> str:
    """Return what is wrong with a template's grants ('' when nothing is)."""
    if not isinstance(grants, dict) or not grants:
        return 'Give an object of tool names and tiers, e.g. {"search_seats": 0}.'
    if any(not isinstance(tier, int) or isinstance(tier, bool) or not 0 <= tier <= 3 for tier in grants.values()):
        return "Each tier must be an integer from 0 to 3."
    unknown = sorted(set(grants) - set(Tool.objects.filter(name__in=list(grants)).values_list("name", flat=True)))
    return f"Unknown tool(s): {', '.join(unknown)}." if unknown else ""
