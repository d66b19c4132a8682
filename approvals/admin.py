"""Calls and decisions in admin: for reading only. People are audited like the catalog.

A call changes state only through its model methods (compare-and-set, audited):
the reviewer console decides calls, workers run them; admin never edits one.
"""

from __future__ import annotations

from datetime import timedelta

from django.contrib import admin
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User
from django.db import transaction
from django.db.models import Model
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path
from django.utils import timezone
from django.utils.safestring import SafeString

from agents.models import Agent
from approvals import limits
from approvals.models import Decision, ToolCall
from approvals.whatif import replay, stored_calls
from audit.typealiases import JSONValue
from toolcatalog.admin import ToolAdmin
from toolcatalog.adminkit import AuditedModelAdmin, pretty_json
from toolcatalog.forms import WhatIfForm
from toolcatalog.models import Tool
from toolcatalog.policies import cumulative_specs, tier_specs
from toolcatalog.policy import ToolPolicy, Usage, compile_policy
from toolcatalog.sensitive import mask_arguments


class ReadOnlyAdminMixin:
    """No add, change or delete: the admin shows rows, never edits them."""

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


class DecisionInline(ReadOnlyAdminMixin, admin.TabularInline[Decision, ToolCall]):
    model = Decision
    extra = 0
    fields = readonly_fields = ("created_at", "reviewer_name", "kind", "reason", "tool_version", "arguments_hash")


@admin.register(ToolCall)
class ToolCallAdmin(ReadOnlyAdminMixin, admin.ModelAdmin[ToolCall]):
    list_display = [
        "short_id",
        "created_at",
        "tool",
        "agent",
        "status",
        "risk_tier",
        "approvals_required",
        "tool_version",
        "conversation_id",
    ]
    list_filter = ["status", "risk_tier", "tool", "agent"]
    # Exact matches only: they use indexes, where a substring search scans 100,000s of rows.
    search_fields = ["=id", "=idempotency_key", "=conversation_id", "=agent__name", "=tool__name"]
    list_select_related = ["tool", "agent"]
    date_hierarchy = "created_at"
    show_full_result_count = False  # counting 100,000s of rows on every page is the slow part
    inlines = [DecisionInline]
    fieldsets = [
        (None, {"fields": ["id", "tool", "tool_version", "agent", "status", "created_at", "justification"]}),
        ("Arguments", {"fields": ["arguments_pretty", "original_arguments_pretty", "arguments_hash"]}),
        ("Risk", {"fields": ["risk_tier", "risk_reasons_pretty", "approvals_required", "expires_at"]}),
        (
            "Idempotency",
            {"fields": ["idempotency_key", "request_hash", "conversation_id", "step", "call_index"]},
        ),
        (
            "Outcome",
            {
                "fields": [
                    "decided_at",
                    "approved_arguments_hash",
                    "approved_tool_version",
                    "attempts",
                    "lease_expires_at",
                    "finished_at",
                    "preview_pretty",
                    "result_pretty",
                    "error_pretty",
                ]
            },
        ),
    ]

    def get_readonly_fields(self, request: HttpRequest, obj: ToolCall | None = None) -> list[str]:
        return [name for _, options in self.fieldsets for name in options["fields"] if isinstance(name, str)]

    @admin.display(description="call", ordering="id")
    def short_id(self, call: ToolCall) -> str:
        return str(call.pk)[:8]

    @admin.display(description="arguments")
    def arguments_pretty(self, call: ToolCall) -> SafeString:
        return pretty_json(mask_arguments(call.tool, call.arguments))

    @admin.display(description="original arguments (before a reviewer's edit)")
    def original_arguments_pretty(self, call: ToolCall) -> SafeString | str:
        if call.original_arguments is None:
            return "—"
        return pretty_json(mask_arguments(call.tool, call.original_arguments))

    @admin.display(description="risk reasons")
    def risk_reasons_pretty(self, call: ToolCall) -> SafeString:
        return pretty_json(call.risk_reasons)

    @admin.display(description="preview")
    def preview_pretty(self, call: ToolCall) -> SafeString | str:
        return pretty_json(call.preview) if call.preview is not None else "—"

    @admin.display(description="result")
    def result_pretty(self, call: ToolCall) -> SafeString | str:
        return pretty_json(call.result) if call.result is not None else "—"

    @admin.display(description="error")
    def error_pretty(self, call: ToolCall) -> SafeString | str:
        return pretty_json(call.error) if call.error is not None else "—"


@admin.register(Decision)
class DecisionAdmin(ReadOnlyAdminMixin, admin.ModelAdmin[Decision]):
    list_display = ["created_at", "call", "reviewer_name", "kind", "tool_version", "reason"]
    list_filter = ["kind"]
    search_fields = ["reviewer_name", "=call__id", "reason"]
    list_select_related = ["call__tool", "call__agent"]
    raw_id_fields = ["call", "reviewer"]
    date_hierarchy = "created_at"
    show_full_result_count = False


# Who may review (users, groups and their permissions) is policy too: audit it like the catalog.
admin.site.unregister(User)
admin.site.unregister(Group)


@admin.register(User)
class AuditedUserAdmin(AuditedModelAdmin[User], UserAdmin[User]):
    audit_exclude = ("password", "last_login")

    def user_change_password(self, request: HttpRequest, id: str, form_url: str = "") -> HttpResponse:
        """Change a password; Django's view is not atomic, so make the change and its audit event one."""
        with transaction.atomic():
            return super().user_change_password(request, id, form_url)


@admin.register(Group)
class AuditedGroupAdmin(AuditedModelAdmin[Group], GroupAdmin):
    pass


# The catalog's admin, plus policy what-if: it replays stored calls, which live here.
admin.site.unregister(Tool)


@admin.register(Tool)
class GovernedToolAdmin(ToolAdmin):
    def get_urls(self) -> list[URLPattern]:
        name = f"{self.opts.app_label}_{self.opts.model_name}"
        whatif = path("<path:object_id>/whatif/", self.admin_site.admin_view(self.whatif_view), name=f"{name}_whatif")
        return [whatif, *super().get_urls()]

    def window_usage(self, tool: Tool, policy: ToolPolicy, agent_name: str, arguments: JSONValue) -> dict[str, Usage]:
        """Return the tool's cumulative limits' totals as they stand, for the agent named (if any)."""
        if not policy.cumulative or not isinstance(arguments, dict):
            return {}
        agent = Agent.objects.filter(name=agent_name).first() if agent_name else None
        return limits.usage_now(policy, tool, agent, arguments)

    def whatif_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Replay the tool's recent calls against its current rules, or against edited, unsaved ones."""
        tool = self.viewable_tool(request, object_id)
        tiers = tier_specs()
        current = self.audit_related(tool)["rules"]
        initial = {"days": 30, "base_tier": tool.base_tier.level, "rules": current}
        form = WhatIfForm(request.POST or None, initial=initial, tier_levels=set(tiers))
        report, edited = None, False
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            edited = data["rules"] != current or data["base_tier"] != tool.base_tier.level
            policy = compile_policy(
                name=tool.name,
                version=tool.version,
                base_tier=data["base_tier"],
                input_schema=tool.input_schema,
                rules=[(r["name"], r["description"], r["tier"], r["condition"]) for r in data["rules"] if r["enabled"]],
                tiers=tiers,
                cumulative=cumulative_specs(tool),  # the saved limits, judged over the replayed calls' windows
            )
            report = replay(policy, stored_calls(tool.pk, timezone.now() - timedelta(days=data["days"])))
        return self.tool_page(
            request,
            tool,
            "whatif.html",
            f"Policy what-if for {tool.name}",
            form=form,
            report=report,
            edited=edited,
            tier_names={level: spec.name for level, spec in tiers.items()},
            current_rules=pretty_json(current),
        )
