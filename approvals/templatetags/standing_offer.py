"""The approval form's offer of a standing approval: whether the call's tier allows one, and its prefill."""

from __future__ import annotations

import json

from django import template

from approvals import standing
from approvals.models import ToolCall
from toolcatalog.models import RiskTier

register = template.Library()
# What the form suggests, at most the tier's window.
DEFAULT_USES = 10
DEFAULT_MINUTES = 60


@register.simple_tag
def like_this_offer(call: ToolCall, tier: RiskTier | None) -> dict[str, object] | None:
    """Return the prefilled terms of a standing approval from `call`, or None if its tier allows none."""
    if standing.refusal(tier) is not None or tier is None:
        return None
    max_minutes = max(1, int(tier.approval_window.total_seconds() // 60))
    return {
        "condition": json.dumps(standing.prefill(call), indent=2, ensure_ascii=False),
        "uses": DEFAULT_USES,
        "minutes": min(DEFAULT_MINUTES, max_minutes),
        "max_minutes": max_minutes,
        "approvals": max(tier.approvals_required, 1),
    }


@register.filter
def condition_json(condition: object) -> str:
    """Return a standing approval's condition as indented JSON."""
    return json.dumps(condition, indent=2, ensure_ascii=False, sort_keys=True)
