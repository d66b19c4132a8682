"""Standing approvals in the console: given with an approval, listed, approved by a second reviewer, revoked.

The rules live in `approvals.standing`; these views translate requests and refusals.
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

from django import forms
from django.contrib import messages
from django.http import HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from approvals import standing
from approvals.decisions import DecisionRefused
from approvals.models import StandingApproval
from approvals.views.access import reviewer_required
from audit.http import ConsoleRequest


class LikeThisForm(forms.Form):
    """The approval form's "also approve calls like this" part."""

    like_this = forms.BooleanField(required=False)
    like_this_condition = forms.CharField(required=False, max_length=20_000)
    like_this_uses = forms.IntegerField(required=False, min_value=1, max_value=standing.MAX_USES)
    like_this_minutes = forms.IntegerField(required=False, min_value=1, max_value=60 * 24 * 365)

    def terms(self) -> standing.Terms | None:
        """Return the terms asked for (None: the box was not ticked); raise DecisionRefused if they are unreadable."""
        if not self.is_valid():
            problems = [str(error) for errors in self.errors.values() for error in errors]
            raise DecisionRefused("Calls like this: " + "; ".join(problems))
        data = self.cleaned_data
        if not data["like_this"]:
            return None
        try:
            condition = json.loads(data["like_this_condition"] or "")
        except json.JSONDecodeError as error:
            raise DecisionRefused(f"Calls like this: the condition is not JSON ({error.msg}).") from error
        if not isinstance(condition, dict) or not data["like_this_uses"] or not data["like_this_minutes"]:
            raise DecisionRefused("Calls like this: give a condition (a JSON object), a number of uses and minutes.")
        return standing.Terms(condition, data["like_this_uses"], timedelta(minutes=data["like_this_minutes"]))


def like_this_terms(post: QueryDict) -> standing.Terms | None:
    """Return the standing approval an approval form asks for, if any (DecisionRefused when unreadable)."""
    return LikeThisForm(post).terms()


def granted_words(like_this: standing.Terms | None) -> str:
    """Return what the reviewer reads about the standing approval they gave with an approval."""
    if like_this is None:
        return ""
    return (
        f" Calls like this are approved on their own, {like_this.max_uses} at most, once the tier's approvals are in."
    )


@require_GET
@reviewer_required
def standing_list(request: ConsoleRequest) -> HttpResponse:
    """List standing approvals: their terms, approvers, uses and state, with Approve and Revoke."""
    now = timezone.now()
    rows = [(item, item.state(now), standing.approver_names(item)) for item in standing.listed()]
    return render(request, "approvals/standing.html", {"rows": rows})


@require_POST
@reviewer_required
def revoke(request: ConsoleRequest, pk: uuid.UUID) -> HttpResponse:
    """Revoke a standing approval at once."""
    try:
        if standing.revoke(pk, request.user):
            messages.success(request, "Revoked: it approves no more calls.")
        else:
            messages.info(request, "It was already revoked.")
    except DecisionRefused as refused:
        messages.error(request, str(refused))
    return redirect("approvals:standing")


@require_POST
@reviewer_required
def endorse(request: ConsoleRequest, pk: uuid.UUID) -> HttpResponse:
    """Add this reviewer's approval to a standing approval that waits for the tier's approvals."""
    try:
        item: StandingApproval = standing.endorse(pk, request.user)
        active = item.activated_at is not None
        messages.success(request, "Approved: it is active now." if active else "Your approval is recorded.")
    except DecisionRefused as refused:
        messages.error(request, str(refused))
    return redirect("approvals:standing")
