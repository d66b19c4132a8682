"""Agents in admin: grants inline, tokens shown exactly once, rotation, deactivation, breakers.

A token exists in clear only in the one response that shows it (never in a
message, a session or the audit log, which keep its first characters).
`Agent.authenticate()` checks `active` and the token hash on every request, so a
deactivation or a rotation takes effect on the agent's next request.
"""

from __future__ import annotations

from typing import TypedDict

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Count, QuerySet
from django.forms import ModelForm
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.cache import add_never_cache_headers
from django_stubs_ext import WithAnnotations

from agents import breakers
from agents.models import Agent, CircuitBreaker, Grant
from audit.typealiases import DjangoValue, JSONObject
from toolcatalog.adminkit import AuditedModelAdmin
from toolcatalog.signals import announce_policy_change


class GrantInline(admin.TabularInline[Grant, Agent]):
    model = Grant
    extra = 0
    fields = ["tool", "max_tier"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Grant]:
        return super().get_queryset(request).select_related("tool", "agent")


class _GrantCount(TypedDict):
    grant_count: int


# Where save_model leaves a new agent's token for response_add, the one response that shows it.
NEW_TOKENS_KEY = "_gatehouse_new_tokens"


@admin.register(Agent)
class AgentAdmin(AuditedModelAdmin[Agent]):
    inlines = [GrantInline]
    change_form_template = "admin/agents/agent/change_form.html"
    list_display = [
        "name",
        "owner",
        "active",
        "token_hint",
        "grant_count",
        "max_calls_per_conversation",
        "last_seen_at",
    ]
    list_filter = ["active"]
    search_fields = ["name", "description", "owner__username", "token_hint"]
    list_select_related = ["owner"]
    raw_id_fields = ["owner"]
    readonly_fields = ["token_hint", "created_at", "last_seen_at"]
    fields = [
        "name",
        "description",
        "owner",
        "active",
        "max_calls_per_conversation",
        "max_calls_per_window",
        *readonly_fields,
    ]
    actions = ["rotate_tokens", "deactivate"]
    audit_exclude = ("token_hash",)  # the hint identifies the token; its hash stays out of the log

    def get_queryset(self, request: HttpRequest) -> QuerySet[Agent]:
        agents: QuerySet[Agent] = super().get_queryset(request).annotate(grant_count=Count("grants"))
        return agents

    @admin.display(description="grants", ordering="grant_count")
    def grant_count(self, agent: WithAnnotations[Agent, _GrantCount]) -> int:
        return agent.grant_count

    def audit_related(self, agent: Agent) -> JSONObject:
        grants = Grant.objects.filter(agent=agent).select_related("tool").order_by("tool__name")
        return {"grants": {g.tool.name: g.max_tier for g in grants}}

    def audit_names(self, agent: Agent) -> dict[str, str]:
        return {"agent_name": agent.name}

    # Tokens: issued on add, rotated on demand, shown once.

    def save_model(self, request: HttpRequest, obj: Agent, form: ModelForm[Agent], change: bool) -> None:
        """Save; a new agent gets its first token, kept in clear only for the response that shows it."""
        if not change:
            request.__dict__[NEW_TOKENS_KEY] = [(obj, obj.set_new_token())]
        super().save_model(request, obj, form, change)

    def save_related(self, request: HttpRequest, form: ModelForm[Agent], formsets: DjangoValue, change: bool) -> None:
        """Save the grants; the agent's pending calls are judged again once this commits."""
        super().save_related(request, form, formsets, change)
        if change:
            announce_policy_change(Agent, agent_id=form.instance.pk)

    def response_add(self, request: HttpRequest, obj: Agent, post_url_continue: str | None = None) -> HttpResponse:
        """Show the new agent's token, once, instead of redirecting."""
        issued: list[tuple[Agent, str]] = request.__dict__[NEW_TOKENS_KEY]
        return self._tokens_page(request, issued, "Agent created")

    def _tokens_page(self, request: HttpRequest, issued: list[tuple[Agent, str]], title: str) -> HttpResponse:
        response = TemplateResponse(
            request,
            "admin/agents/agent/token.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "title": title,
                "issued": [
                    (agent, token, reverse("admin:agents_agent_change", args=[agent.pk])) for agent, token in issued
                ],
            },
        )
        add_never_cache_headers(response)  # a token must not linger in any cache
        return response

    def _rotate(self, request: HttpRequest, agent: Agent) -> str:
        """Rotate one agent's token and audit it (inside the caller's transaction); return the new token."""
        before = self.audit_snapshot(agent)
        token = agent.rotate_token()
        self.audit_event(
            request,
            "token_rotated",
            agent.pk,
            str(agent),
            self.audit_names(agent),
            before=before,
            after=self.audit_snapshot(agent),
            message="Token rotated; the old one stopped working.",
        )
        return token

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.rotate_token_view)
        return [path("<path:object_id>/rotate-token/", view, name="agents_agent_rotate_token"), *super().get_urls()]

    def rotate_token_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """GET: ask to confirm. POST: issue a new token (the old one stops at once) and show it once."""
        agent = self.get_object(request, unquote(object_id))
        if agent is None:
            raise Http404("No such agent.")
        if not self.has_change_permission(request, agent):
            raise PermissionDenied
        if request.method == "POST":
            with transaction.atomic():
                token = self._rotate(request, agent)
            return self._tokens_page(request, [(agent, token)], "Token rotated")
        context = {**self.admin_site.each_context(request), "opts": self.opts, "original": agent}
        context["title"] = f"Rotate the token of {agent.name}?"
        return TemplateResponse(request, "admin/agents/agent/rotate_confirm.html", context)

    def _locked(self, queryset: QuerySet[Agent]) -> QuerySet[Agent]:
        """Return the selected agents locked for update (without the list page's grant counts)."""
        pks = list(queryset.values_list("pk", flat=True))
        return Agent.objects.select_for_update().filter(pk__in=pks).order_by("name")

    @admin.action(description="Rotate the tokens of the selected agents", permissions=["change"])
    def rotate_tokens(self, request: HttpRequest, queryset: QuerySet[Agent]) -> HttpResponse:
        with transaction.atomic():
            issued = [(agent, self._rotate(request, agent)) for agent in self._locked(queryset)]
        return self._tokens_page(request, issued, "Tokens rotated")

    @admin.action(
        description="Deactivate the selected agents (their next request is refused, their waiting calls withdrawn)",
        permissions=["change"],
    )
    def deactivate(self, request: HttpRequest, queryset: QuerySet[Agent]) -> None:
        """Deactivate; saving each agent inactive withdraws its calls that nothing has started (approvals listens)."""
        with transaction.atomic():
            agents = list(self._locked(queryset).filter(active=True))
            for agent in agents:
                before = self.audit_snapshot(agent)
                agent.active = False
                agent.save(update_fields=["active"])
                names = self.audit_names(agent)
                after = self.audit_snapshot(agent)
                self.audit_event(
                    request, "changed", agent.pk, str(agent), names, before=before, after=after, message=""
                )
        self.message_user(request, f"{len(agents)} agent(s) deactivated.", messages.SUCCESS)


@admin.register(CircuitBreaker)
class CircuitBreakerAdmin(admin.ModelAdmin[CircuitBreaker]):
    """Breakers are opened by the pipeline and closed by a person; nothing else is edited here."""

    list_display = [
        "agent",
        "tool",
        "is_open",
        "failure_kind",
        "consecutive_failures",
        "consecutive_any_kind",
        "opened_at",
    ]
    list_filter = [("opened_at", admin.EmptyFieldListFilter), "tool"]
    search_fields = ["agent__name", "tool__name", "failure_kind"]
    list_select_related = ["agent", "tool"]
    actions = ["reset_breakers"]

    @admin.display(boolean=True, description="open", ordering="opened_at")
    def is_open(self, breaker: CircuitBreaker) -> bool:
        return breaker.opened_at is not None

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: CircuitBreaker | None = None) -> bool:
        # The changelist needs it for the reset action; the change form shows nothing editable.
        return obj is None and super().has_change_permission(request)

    def has_delete_permission(self, request: HttpRequest, obj: CircuitBreaker | None = None) -> bool:
        return False

    @admin.action(description="Reset (close) the selected breakers", permissions=["change"])
    def reset_breakers(self, request: HttpRequest, queryset: QuerySet[CircuitBreaker]) -> None:
        closed = sum(breakers.reset(breaker, by=request.user.get_username()) for breaker in queryset)
        self.message_user(request, f"{closed} breaker(s) closed.", messages.SUCCESS)
