"""Cumulative limits in the tool's admin page: an inline whose form checks the limit can be counted."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from audit.typealiases import JSONObject
from toolcatalog.models import CumulativeRule, CumulativeScope, Tool
from toolcatalog.sensitive import is_sensitive

NUMERIC_TYPES = ("integer", "number")


def sum_problem(tool: Tool, argument: str) -> str | None:
    """Return why `argument` of `tool` cannot be summed (not a top-level number, or a secret), or None."""
    spec = (tool.input_schema.get("properties") or {}).get(argument)
    if not isinstance(spec, dict) or spec.get("type") not in NUMERIC_TYPES:
        return f"“{argument}” is not a number argument of {tool.name} (its schema must say integer or number)."
    if is_sensitive(spec):
        # Stored as a keyed hash: there is nothing to add up.
        return f"“{argument}” is sensitive, so its values are not stored and cannot be added up."
    return None


class CumulativeRuleForm(forms.ModelForm[CumulativeRule]):
    """A cumulative limit: what it adds up must be a number the calls store, and a window must exist."""

    class Meta:
        model = CumulativeRule
        fields = ["name", "description", "sum_argument", "per", "window", "over", "tier", "enabled"]
        help_texts = {"tier": "The tier a call that takes the window's total over the limit is raised to."}

    def clean(self) -> JSONObject:
        data: JSONObject = super().clean() or {}
        tool = self.instance.tool if self.instance.tool_id else None
        if tool is None:
            return data
        argument = data.get("sum_argument")
        if isinstance(argument, str) and argument and (problem := sum_problem(tool, argument)):
            self.add_error("sum_argument", problem)
        if data.get("per") == CumulativeScope.RESOURCE and not tool.resource_argument:
            self.add_error("per", "This tool names no resource argument; set it under Contract first.")
        window = data.get("window")
        if window is not None and window.total_seconds() <= 0:
            self.add_error("window", "A window is longer than zero.")
        return data


class CumulativeRuleInline(admin.StackedInline[CumulativeRule, Tool]):
    model = CumulativeRule
    form = CumulativeRuleForm
    extra = 0
    fields = ["name", "description", ("sum_argument", "per"), ("window", "over"), "tier", "enabled"]
    verbose_name = "cumulative limit"

    def get_queryset(self, request: HttpRequest) -> QuerySet[CumulativeRule]:
        return super().get_queryset(request).select_related("tier", "tool")


def limits_snapshot(tool: Tool) -> JSONObject:
    """Return the tool's cumulative limits as the audit records a catalog change."""
    limits = CumulativeRule.objects.filter(tool=tool).select_related("tier").order_by("name")
    return {
        "cumulative_rules": [
            {
                "name": limit.name,
                "description": limit.description,
                "sum": limit.sum_argument,
                "per": limit.per,
                "window_seconds": int(limit.window.total_seconds()),
                "over": limit.over,
                "tier": limit.tier.level,
                "enabled": limit.enabled,
            }
            for limit in limits
        ]
    }
