"""The tool page's inline of approver groups: who may approve the tool's calls from which tier up."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from audit.typealiases import JSONObject
from toolcatalog.models import ApproverGroup, Tool


class ApproverGroupInline(admin.TabularInline[ApproverGroup, Tool]):
    model = ApproverGroup
    extra = 0
    fields = ["min_tier", "group"]
    verbose_name = "approver group"
    verbose_name_plural = (
        "Approver groups (replace the tier's group for this tool; several at one tier: approvals from different groups)"
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[ApproverGroup]:
        return super().get_queryset(request).select_related("group", "tool")


def approvers_snapshot(tool: Tool) -> JSONObject:
    """Return what the tool's audit event shows of its approver groups."""
    rows = ApproverGroup.objects.filter(tool=tool).select_related("group").order_by("min_tier", "group__name")
    return {"approver_groups": [{"min_tier": row.min_tier, "group": row.group.name} for row in rows]}
