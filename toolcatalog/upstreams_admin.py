"""Upstream MCP servers in admin: register one, set its headers or environment (write-only), sync it.

Header and environment values are secrets: their inputs never render a stored value
(blank keeps it), and the audit event of a save names them without their values.
Each upstream tool's link (retry safety, preview tool and argument mapping) is edited
on its own page; the catalog tool itself (tier, rules, enabled) stays on the tool's page.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.db import models
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from audit.typealiases import JSONObject
from toolcatalog.adminkit import AuditedModelAdmin, admin_actor, pretty_json
from toolcatalog.upstreams import Upstream, UpstreamTool, UpstreamValue
from toolcatalog.upstreams_client import UpstreamError
from toolcatalog.upstreams_sync import sync
from vault import secrets


class UpstreamValueInline(admin.TabularInline[UpstreamValue, Upstream]):
    model = UpstreamValue
    extra = 1
    fields = ["kind", "name", "value"]
    verbose_name = "header or environment variable"
    verbose_name_plural = "headers (streamable_http) and environment (stdio) — values are write-only"


class UpstreamToolInline(admin.TabularInline[UpstreamTool, Upstream]):
    model = UpstreamTool
    extra = 0
    can_delete = False
    fields = ["catalog_tool", "remote_name", "gone", "repeat_safe", "preview_tool"]
    readonly_fields = ["catalog_tool", "remote_name", "gone", "repeat_safe", "preview_tool"]
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Upstream | None = None) -> bool:
        return False  # tools come from a sync

    @admin.display(description="catalog tool")
    def catalog_tool(self, link: UpstreamTool) -> SafeString:
        url = reverse("admin:toolcatalog_tool_change", args=[link.tool_id])
        return format_html('<a href="{}">{}</a>', url, link.tool.name)


@admin.register(Upstream)
class UpstreamAdmin(AuditedModelAdmin[Upstream]):
    formfield_overrides = {**AuditedModelAdmin.formfield_overrides, models.URLField: {"assume_scheme": "https"}}
    inlines = [UpstreamValueInline, UpstreamToolInline]
    list_display = ["name", "transport", "location", "enabled", "sync_status", "synced_at", "tool_count"]
    list_filter = ["transport", "enabled", "sync_status"]
    search_fields = ["name", "url", "command"]
    readonly_fields = ["sync_status", "synced_at", "sync_message"]
    fieldsets = [
        (None, {"fields": ["name", "prefix", "enabled"]}),
        ("Transport", {"fields": ["transport", "url", "command"]}),
        ("Last sync", {"fields": ["sync_status", "synced_at", "sync_message"]}),
    ]
    actions = ["sync_selected"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Upstream]:
        return super().get_queryset(request).annotate(tool_total=Count("tools"))

    @admin.display(description="where")
    def location(self, upstream: Upstream) -> str:
        return upstream.where()

    @admin.display(description="tools")
    def tool_count(self, upstream: Upstream) -> int:
        return int(getattr(upstream, "tool_total", 0))

    def audit_related(self, upstream: Upstream) -> JSONObject:
        """Headers and variables by name; a value shows only as set or not (never the secret)."""
        values = UpstreamValue.objects.filter(upstream=upstream).order_by("kind", "name")
        return {"values": [{"kind": v.kind, "name": v.name, "value": secrets.mask(v.value)} for v in values]}

    @admin.action(description="Sync the selected upstreams now")
    def sync_selected(self, request: HttpRequest, queryset: QuerySet[Upstream]) -> None:
        for upstream in queryset:
            try:
                report = sync(upstream, admin_actor(request))
            except UpstreamError as error:
                self.message_user(request, f"Sync of {upstream.name} failed ({error.code}): {error}", messages.ERROR)
                continue
            skipped = "; ".join(f"{s['tool']}: {s['reason']}" for s in report.skipped)
            text = (
                f"Synced {upstream.name}: {len(report.added)} added, {len(report.changed)} changed, "
                f"{len(report.disabled)} disabled, {len(report.enabled)} enabled again"
                + (f"; skipped {skipped}" if skipped else ".")
            )
            self.message_user(request, text, messages.WARNING if skipped else messages.SUCCESS)


@admin.register(UpstreamTool)
class UpstreamToolAdmin(AuditedModelAdmin[UpstreamTool]):
    list_display = ["tool", "upstream", "remote_name", "gone", "repeat_safe", "preview_tool"]
    list_filter = ["upstream", "gone", "repeat_safe"]
    search_fields = ["remote_name", "tool__name"]
    list_select_related = ["tool", "upstream"]
    fields = ["tool", "upstream", "remote_name", "gone", "repeat_safe", "preview_tool", "preview_arguments", "synced"]
    readonly_fields = ["tool", "upstream", "remote_name", "gone", "synced"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # tools come from a sync

    def has_delete_permission(self, request: HttpRequest, obj: UpstreamTool | None = None) -> bool:
        return False  # a tool gone upstream is disabled, never deleted

    @admin.display(description="as last synced")
    def synced(self, link: UpstreamTool) -> SafeString:
        return pretty_json(link.definition)

    def audit_names(self, link: UpstreamTool) -> dict[str, str]:
        return {"tool_name": link.tool.name}
