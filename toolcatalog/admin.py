"""The catalog in admin: tools with their rules inline, risk tiers, try-arguments (policy what-if: approvals.admin).

Every save is audited (AuditedModelAdmin) and bumps the tool's version (the
models do that); the change is announced after commit so pending calls are
judged again.
"""

from __future__ import annotations

from typing import TypedDict

from django.contrib import admin
from django.contrib.admin.options import InlineModelAdmin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Count, QuerySet
from django.forms import ModelForm
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django_stubs_ext import WithAnnotations

from audit.typealiases import DjangoValue, JSONObject, JSONValue
from toolcatalog.adminkit import AuditedModelAdmin
from toolcatalog.approvers_admin import ApproverGroupInline, approvers_snapshot
from toolcatalog.forms import RiskRuleForm, RiskTierForm, ToolAdminForm, TryArgumentsForm
from toolcatalog.httptools import HTTP_INLINES, http_snapshot
from toolcatalog.limits_admin import CumulativeRuleInline, limits_snapshot
from toolcatalog.models import ExecutorKind, RiskRule, RiskTier, Tool
from toolcatalog.policies import policy_for, tier_specs
from toolcatalog.policy import TierGrant, ToolPolicy, Usage, evaluate
from toolcatalog.signals import announce_policy_change


@admin.register(RiskTier)
class RiskTierAdmin(AuditedModelAdmin[RiskTier]):
    form = RiskTierForm
    list_display = ["level", "name", "requires_approval", "approvals_required", "approval_window", "approver_group"]
    list_display_links = ["level", "name"]
    list_select_related = ["approver_group"]
    list_filter = ["requires_approval"]
    search_fields = ["name", "description"]
    ordering = ["level"]

    def save_model(self, request: HttpRequest, obj: RiskTier, form: ModelForm[RiskTier], change: bool) -> None:
        """Save, and have every pending call judged again (what a tier takes may have changed)."""
        super().save_model(request, obj, form, change)
        if change:
            announce_policy_change(RiskTier)


class RiskRuleInline(admin.StackedInline[RiskRule, Tool]):
    model = RiskRule
    form = RiskRuleForm
    extra = 0
    fields = ["name", "description", "condition", "tier", "enabled"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[RiskRule]:
        return super().get_queryset(request).select_related("tier", "tool")


class _RuleCount(TypedDict):
    rule_count: int


@admin.register(Tool)
class ToolAdmin(AuditedModelAdmin[Tool]):
    form = ToolAdminForm
    change_form_template = "admin/toolcatalog/tool/change_form.html"
    inlines = [RiskRuleInline, CumulativeRuleInline, ApproverGroupInline, *HTTP_INLINES]
    list_display = [
        "name",
        "title",
        "base_tier",
        "rule_count",
        "executor_kind",
        "read_only_hint",
        "destructive_hint",
        "enabled",
        "version",
        "updated_at",
    ]
    list_filter = ["enabled", "base_tier", "executor_kind", "read_only_hint", "destructive_hint"]
    search_fields = ["name", "title", "description", "executor_ref"]
    list_select_related = ["base_tier"]
    readonly_fields = ["version", "updated_at"]
    fieldsets = [
        (None, {"fields": ["name", "title", "description", "enabled", ("version", "updated_at")]}),
        ("Contract", {"fields": ["input_schema", "output_schema", "resource_argument"]}),
        ("Risk", {"fields": ["base_tier"]}),
        (
            "Annotations (MCP hints shown to agents)",
            {"fields": [("read_only_hint", "destructive_hint", "idempotent_hint", "open_world_hint")]},
        ),
        ("Execution", {"fields": ["executor_kind", "executor_ref", "audience"]}),
    ]

    def get_inlines(self, request: HttpRequest, obj: Tool | None) -> list[type[InlineModelAdmin[DjangoValue, Tool]]]:
        """Return the inlines; an HTTP API's request only on a new tool's page and on `http` tools' pages."""
        inlines = list(super().get_inlines(request, obj))
        if obj is None or obj.executor_kind == ExecutorKind.HTTP:
            return inlines
        return [inline for inline in inlines if inline not in HTTP_INLINES]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Tool]:
        tools: QuerySet[Tool] = super().get_queryset(request).annotate(rule_count=Count("rules"))
        return tools

    @admin.display(description="rules", ordering="rule_count")
    def rule_count(self, tool: WithAnnotations[Tool, _RuleCount]) -> int:
        return tool.rule_count

    def audit_related(self, tool: Tool) -> JSONObject:
        rules = RiskRule.objects.filter(tool=tool).select_related("tier").order_by("name")
        return (
            {
                "rules": [
                    {
                        "name": r.name,
                        "description": r.description,
                        "condition": r.condition,
                        "tier": r.tier.level,
                        "enabled": r.enabled,
                    }
                    for r in rules
                ]
            }
            | limits_snapshot(tool)
            | http_snapshot(tool)
            | approvers_snapshot(tool)
        )

    def audit_names(self, tool: Tool) -> dict[str, str]:
        return {"tool_name": tool.name}

    def save_model(self, request: HttpRequest, obj: Tool, form: ModelForm[Tool], change: bool) -> None:
        """Save the tool, unless nothing of it changed: an untouched tool is not a new version.

        Rules changed inline bump the version themselves, in the same transaction.
        """
        if change and not form.has_changed():
            self.remember_before(request, obj)
            return
        super().save_model(request, obj, form, change)

    # Extra pages: try arguments, policy what-if.

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        name = f"{self.opts.app_label}_{self.opts.model_name}"
        return [
            path("<path:object_id>/try/", view(self.try_arguments_view), name=f"{name}_try"),
            *super().get_urls(),
        ]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, DjangoValue] | None = None,
    ) -> HttpResponse:
        extra = {"try_form": TryArgumentsForm(initial={"arguments": {}}), **(extra_context or {})}
        return super().change_view(request, object_id, form_url, extra)

    def viewable_tool(self, request: HttpRequest, object_id: str) -> Tool:
        tool = self.get_object(request, unquote(object_id))
        if tool is None:
            raise Http404("No such tool.")
        if not self.has_view_permission(request, tool):
            raise PermissionDenied
        return tool

    def tool_page(
        self, request: HttpRequest, tool: Tool, template: str, title: str, **context: DjangoValue
    ) -> TemplateResponse:
        return TemplateResponse(
            request,
            f"admin/toolcatalog/tool/{template}",
            {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "original": tool,
                "title": title,
                "subtitle": tool.name,
                "change_url": reverse("admin:toolcatalog_tool_change", args=[tool.pk]),
                **context,
            },
        )

    def window_usage(self, tool: Tool, policy: ToolPolicy, agent_name: str, arguments: JSONValue) -> dict[str, Usage]:
        """Return the totals of the tool's cumulative limits now: the calls live above the catalog, so none here.

        The admin that knows the calls (approvals.admin) reads them.
        """
        return {}

    def try_arguments_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Judge pasted arguments with the tool's current policy, through the same evaluate() the API runs."""
        tool = self.viewable_tool(request, object_id)
        form = TryArgumentsForm(request.POST or None, initial={"arguments": {}})
        verdict, tiers = None, tier_specs()
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            policy = policy_for(tool, tiers)
            usage = self.window_usage(tool, policy, data.get("agent", ""), data["arguments"])
            verdict = evaluate(policy, TierGrant(data["max_tier"]), data["arguments"], usage)
        return self.tool_page(
            request,
            tool,
            "try_arguments.html",
            f"Try arguments on {tool.name}",
            form=form,
            verdict=verdict,
            tier=tiers.get(verdict.risk_tier) if verdict and verdict.risk_tier is not None else None,
        )


# Upstream MCP servers and their tools (pages of their own).
from toolcatalog import upstreams_admin  # noqa: E402, F401
