"""Who may approve a tool's calls, by tier (`models.ApproverGroup`): "emitir_estorno at tier ≥ 2: finance".

A tool's approver groups, when any apply to a call's tier, replace the tier's own
approver group for that tool. The rows with the highest threshold at or below the
call's tier apply; several groups at that threshold mean a call needing several
approvals needs them from different groups (four-eyes across two teams).
"""

from __future__ import annotations

from django.contrib.auth.models import Group

from toolcatalog.models import ApproverGroup


def groups_for(tool_id: int, tier: int | None) -> list[Group]:
    """Return the groups whose members may approve `tool_id`'s calls at `tier`; [] if the tool names none."""
    if tier is None:
        return []
    rows = list(
        ApproverGroup.objects.filter(tool_id=tool_id, min_tier__lte=tier).select_related("group").order_by("-min_tier")
    )
    return [row.group for row in rows if row.min_tier == rows[0].min_tier]


def applicable(rows: list[tuple[int, int, int]], tool_id: int, tier: int | None) -> set[int]:
    """Return the group ids that apply to `tool_id` at `tier` from prefetched (tool_id, min_tier, group_id) rows."""
    if tier is None:
        return set()
    mine = [(min_tier, group_id) for row_tool, min_tier, group_id in rows if row_tool == tool_id and min_tier <= tier]
    top = max((min_tier for min_tier, _ in mine), default=None)
    return {group_id for min_tier, group_id in mine if min_tier == top}
