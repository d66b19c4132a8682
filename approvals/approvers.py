"""Approver groups: whose approval of a call counts, by the tool's groups for its tier or else the tier's group.

`group_refusal` is what `decisions.check_may_approve` asks, so every decision path
(console, batch, email link, Slack) applies it under the call's row lock.
`queue_refusals` says the same for a page of the queue in a fixed number of queries.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from django.contrib.auth.models import Group, User
from django.db.models import Exists, OuterRef

from approvals.models import ToolCall
from approvals.states import DecisionKind
from toolcatalog.approvers import applicable, groups_for
from toolcatalog.models import ApproverGroup, RiskTier


def approver_groups(call: ToolCall) -> list[Group]:
    """Return the groups whose members may approve `call`; [] if any reviewer may."""
    groups = groups_for(call.tool_id, call.risk_tier)
    if groups or call.risk_tier is None:
        return groups
    tier = RiskTier.objects.select_related("approver_group").filter(level=call.risk_tier).first()
    return [tier.approver_group] if tier and tier.approver_group else []


def _names(groups: Iterable[Group]) -> str:
    return " or ".join(f"“{group.name}”" for group in groups)


def group_refusal(call: ToolCall, reviewer: User) -> str:
    """Return why `reviewer`'s approval of `call` would not count by its approver groups ("" if it would)."""
    groups = approver_groups(call)
    if not groups:
        return ""
    ids = {group.pk for group in groups}
    mine = set(reviewer.groups.filter(pk__in=ids).values_list("pk", flat=True))
    if not mine:
        scope = f"Calls of “{call.tool.name}”" if groups_for(call.tool_id, call.risk_tier) else "Calls"
        return f"{scope} at tier {call.risk_tier} may only be approved by members of {_names(groups)}."
    if len(ids) < 2 or call.approvals_required < 2:
        return ""
    earlier = earlier_approvers_groups(call, reviewer, ids)
    if distinct_groups_covered([*earlier, mine]) < min(len(ids), len(earlier) + 1):
        return (
            f"This call needs its approvals from different groups ({_names(groups)}); the group you approve for "
            "has approved already, so a member of another group must approve."
        )
    return ""


def earlier_approvers_groups(call: ToolCall, reviewer: User, ids: set[int]) -> list[set[int]]:
    """Return, for each other reviewer whose approval of `call` counts, their groups among `ids`."""
    counted = (
        call.approvals()
        .filter(reviewer_name__in=call.approver_names())
        .exclude(reviewer=reviewer)
        .exclude(reviewer=None)
    )
    approvers = set(counted.values_list("reviewer_id", flat=True))
    memberships = User.groups.through.objects.filter(user_id__in=approvers, group_id__in=ids)
    groups: dict[int, set[int]] = {user_id: set() for user_id in approvers}
    for user_id, group_id in memberships.values_list("user_id", "group_id"):
        groups[user_id].add(group_id)
    return list(groups.values())


def distinct_groups_covered(approvers: list[set[int]]) -> int:
    """Return how many distinct groups the approvers can stand for, each approver for one of theirs (a matching)."""
    holder: dict[int, int] = {}  # group → the approver standing for it

    def place(who: int, tried: set[int]) -> bool:
        for group in approvers[who] - tried:
            tried.add(group)
            if group not in holder or place(holder[group], tried):
                holder[group] = who
                return True
        return False

    return sum(place(who, set()) for who in range(len(approvers)))


def is_member(reviewer: User, group_field: str) -> Exists:
    """Return an expression: whether `reviewer` is in the group the row's `group_field` names."""
    return Exists(User.groups.through.objects.filter(user_id=reviewer.pk, group_id=OuterRef(group_field)))


def tier_groups(reviewer: User) -> dict[int, tuple[str, int | None, bool]]:
    """Return each tier's (name, approver group id, whether `reviewer` is in it), from one query."""
    rows = RiskTier.objects.annotate(member=is_member(reviewer, "approver_group_id"))
    return {
        level: (name, group, member)
        for level, name, group, member in rows.values_list("level", "name", "approver_group_id", "member")
    }


@dataclass(frozen=True)
class _Known:
    """What the queue reads once per page to say whose each call is."""

    rows: list[tuple[int, int, int]]  # the tools' approver groups: (tool_id, min_tier, group_id)
    mine: set[int]  # which of those groups the reviewer is in
    tiers: dict[int, tuple[str, int | None, bool]]
    approved: set[tuple[uuid.UUID, str, int | None]]
    edited: set[tuple[uuid.UUID, str]]


Mine = tuple[uuid.UUID, str, str, int | None]  # a decision of the reviewer: (call_id, kind, arguments_hash, version)


def queue_refusals(
    calls: list[ToolCall], reviewer: User, tiers: dict[int, tuple[str, int | None, bool]], decided: Iterable[Mine]
) -> dict[uuid.UUID, str]:
    """Return why `reviewer` may not approve each call of a queue page ("" if they may), from one more query.

    `tiers` is `tier_groups(reviewer)`; `decided` the reviewer's approvals and edits of these calls.
    The quick reasons only (owner, on behalf of, groups, already approved or edited): the
    call's page applies every rule, and the decision applies them again.
    """
    groups = ApproverGroup.objects.filter(tool_id__in={call.tool_id for call in calls})
    rows = list(
        groups.annotate(member=is_member(reviewer, "group_id")).values_list("tool_id", "min_tier", "group_id", "member")
    )
    known = _Known(
        rows=[(tool, tier, group) for tool, tier, group, _ in rows],
        mine={group for _, _, group, member in rows if member},
        tiers=tiers,
        approved={(c, h, v) for c, kind, h, v in decided if kind == DecisionKind.APPROVE},
        edited={(c, h) for c, kind, h, _ in decided if kind == DecisionKind.EDIT},
    )
    return {call.pk: _quick_refusal(call, reviewer, known) for call in calls}


def _quick_refusal(call: ToolCall, reviewer: User, known: _Known) -> str:
    if call.agent.owner_id == reviewer.pk:
        return "You own the agent that proposed it."
    if call.on_behalf_of_id is not None and call.on_behalf_of_id == reviewer.pk:
        return "It was proposed on your behalf."
    groups = applicable(known.rows, call.tool_id, call.risk_tier)
    _, tier_group, in_tier_group = (
        known.tiers.get(call.risk_tier, ("", None, False)) if call.risk_tier is not None else ("", None, False)
    )
    if (groups and not groups & known.mine) or (not groups and tier_group is not None and not in_tier_group):
        return "Only members of its approver group may approve it."
    if (call.pk, call.arguments_hash) in known.edited:
        return "You edited it into these arguments."
    if (call.pk, call.arguments_hash, call.tool_version) in known.approved:
        return "You approved it; waiting for another reviewer."
    return ""
