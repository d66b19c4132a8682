"""The audit log in admin: readable, searchable, never editable."""

from __future__ import annotations

import json

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from audit.models import Event


@admin.register(Event)
class EventAdmin(admin.ModelAdmin[Event]):
    list_display = ["seq", "created_at", "action", "actor_kind", "actor_name", "agent_name", "tool_name", "call_id"]
    list_filter = ["actor_kind", "action"]
    search_fields = ["=call_id", "actor_name", "agent_name", "tool_name", "action"]
    date_hierarchy = "created_at"
    show_full_result_count = False
    fields = [
        "seq",
        "created_at",
        "action",
        ("actor_kind", "actor_name"),
        ("agent_name", "tool_name"),
        "call_id",
        "data_pretty",
        "digest",
        "prev_hash",
        "hash",
        "sealed_at",
    ]

    @admin.display(description="data")
    def data_pretty(self, event: Event) -> SafeString:
        """Return the event's data as indented JSON in a monospace block."""
        return format_html('<pre class="gh-json">{}</pre>', json.dumps(event.data, ensure_ascii=False, indent=2))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Event | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Event | None = None) -> bool:
        return False
