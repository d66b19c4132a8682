"""The consent page: the signed-in person lets an MCP client act as one of THEIR agents, seeing what it reaches.

django-oauth-toolkit's authorization endpoint (PKCE S256 only, exact redirect URIs)
with two things added: the `resource` must be this deployment's `/mcp` (RFC 8707), so
every token names its audience; and Allow records which agent the client acts as
(`ClientAgent`) before the code is issued.
"""

from __future__ import annotations

from django import forms
from django.contrib.auth.models import User
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.utils.text import slugify
from oauth2_provider.forms import AllowForm
from oauth2_provider.models import Application
from oauth2_provider.views import AuthorizationView

from agents.models import Agent
from agents.provisioning import create_or_update_agent
from audit.chain import record
from audit.models import ActorKind
from oauth.models import AgentTemplate, ClientAgent
from toolcatalog.models import TIER_LEVELS


def mcp_resource(request: HttpRequest) -> str:
    """Return this deployment's `/mcp` as a resource indicator (what tokens must be issued for)."""
    return request.build_absolute_uri("/mcp")


def own_agents(user: User) -> list[Agent]:
    """Return the active agents `user` owns, with their grants and tools (what a client could reach)."""
    agents = Agent.objects.filter(owner=user, active=True).prefetch_related("grants__tool").order_by("name")
    return list(agents)


def request_problem(request: HttpRequest) -> dict[str, str] | None:
    """Return what Gatehouse refuses in an authorization request the toolkit would accept, or None."""
    wanted = mcp_resource(request)
    if request.GET.getlist("resource") != [wanted]:
        message = f"Ask for the resource {wanted} (RFC 8707): Gatehouse issues tokens for its MCP endpoint only."
        return {"error": "invalid_target", "description": message}
    if request.GET.get("code_challenge_method") != "S256" or not request.GET.get("code_challenge"):
        # The toolkit refuses `plain` too, but only once the person has consented.
        return {"error": "invalid_request", "description": "Send a PKCE code_challenge with method S256."}
    return None


class ConsentForm(AllowForm):  # type: ignore[misc]
    """The toolkit's consent form plus the choice: one of the person's agents, or a new one from a template."""

    agent = forms.ChoiceField(required=False, label="Act as")

    def __init__(self, *args: object, user: User, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.user = user
        owned = [(f"agent:{agent.pk}", agent.name) for agent in own_agents(user)]
        templates = [(f"template:{template.pk}", template.name) for template in AgentTemplate.objects.all()]
        self.fields["agent"].choices = owned + templates

    def clean(self) -> dict[str, object]:
        cleaned: dict[str, object] = super().clean()
        if cleaned.get("allow") and not cleaned.get("agent"):
            raise forms.ValidationError("Choose which of your agents this client acts as.")
        return cleaned

    def chosen_agent(self) -> Agent:
        """Return the agent chosen: the person's own, or one created for them now from the template chosen."""
        kind, _, pk = str(self.cleaned_data["agent"]).partition(":")
        if kind == "agent":
            return Agent.objects.get(pk=int(pk), owner=self.user, active=True)
        return agent_from_template(AgentTemplate.objects.get(pk=int(pk)), self.user)


@transaction.atomic
def agent_from_template(template: AgentTemplate, user: User) -> Agent:
    """Return `user`'s agent made from `template` (`<template>-<username>`), creating it the first time.

    A name another owner's agent already has is refused rather than taken over.
    """
    name = f"{template.name}-{slugify(user.get_username())}"[:150]
    existing = Agent.objects.select_for_update().filter(name=name).first()
    if existing is not None:
        if existing.owner_id != user.pk or not existing.active:
            raise ValueError(f"An agent named {name} already exists and is not yours to use.")
        return existing
    grants = {str(tool): int(tier) for tool, tier in template.grants.items()}
    actor = (ActorKind.REVIEWER, user.get_username())
    description = f"Created from the template {template.name} on connecting an MCP client."
    agent, _ = create_or_update_agent(
        name, grants, owner_username=user.get_username(), description=description, actor=actor
    )
    return agent


class ConsentView(AuthorizationView):  # type: ignore[misc]
    template_name = "oauth/authorize.html"
    form_class = ConsentForm

    def get(self, request: HttpRequest, *args: object, **kwargs: object) -> HttpResponseBase:
        problem = request_problem(request)
        if problem:
            # Shown here, never redirected: the redirect URI is not validated yet.
            refusal: HttpResponseBase = self.render_to_response({"error": problem}, status=400)
            return refusal
        response: HttpResponseBase = super().get(request, *args, **kwargs)
        return response

    def get_form_kwargs(self) -> dict[str, object]:
        kwargs: dict[str, object] = super().get_form_kwargs()
        kwargs["user"] = self.request.user
        return kwargs

    def get_context_data(self, **kwargs: object) -> dict[str, object]:
        context: dict[str, object] = super().get_context_data(**kwargs)
        form = context.get("form")
        if "application" not in context and isinstance(form, ConsentForm):  # the form again, with its error
            client_id = form.data.get("client_id", "")
            context["application"] = Application.objects.filter(client_id=client_id).first()
        context["agents"] = own_agents(self.request.user)
        context["templates"] = AgentTemplate.objects.all()
        context["tier_names"] = dict(TIER_LEVELS)
        return context

    def form_valid(self, form: ConsentForm) -> HttpResponse:
        if form.cleaned_data.get("allow"):
            application = Application.objects.get(client_id=form.cleaned_data["client_id"])
            try:
                agent = form.chosen_agent()
            except ValueError as refusal:
                form.add_error("agent", str(refusal))
                refused: HttpResponse = self.form_invalid(form)
                return refused
            bind(application, self.request.user, agent)
        response: HttpResponse = super().form_valid(form)
        return response


@transaction.atomic
def bind(application: Application, user: User, agent: Agent) -> ClientAgent:
    """Record that `application` acts as `agent` for `user` (replacing an earlier choice); audit it."""
    binding, _ = ClientAgent.objects.update_or_create(application=application, user=user, defaults={"agent": agent})
    record(
        "oauth.consented",
        actor=(ActorKind.REVIEWER, user.get_username()),
        agent_name=agent.name,
        data={"client_id": application.client_id, "client_name": application.name[:200]},
    )
    return binding
