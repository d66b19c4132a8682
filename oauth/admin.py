"""Agent templates (what a person may create on the consent page) and the clients people connected."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from oauth.models import AgentTemplate, ClientAgent


@admin.register(AgentTemplate)
class AgentTemplateAdmin(admin.ModelAdmin[AgentTemplate]):
    list_display = ["name", "description", "grants"]
    search_fields = ["name"]


@admin.register(ClientAgent)
class ClientAgentAdmin(admin.ModelAdmin[ClientAgent]):
    """Read-only: people consent and revoke in the console. Deleting a row here stops its tokens at /mcp."""

    list_display = ["application", "agent", "user", "consented_at"]
    list_select_related = ["application", "agent", "user"]
    readonly_fields = ["application", "agent", "user", "consented_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: ClientAgent | None = None) -> bool:
        return False
