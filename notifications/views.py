"""Deciding from a message: the email link's confirmation page, Slack's interactivity endpoint, and preferences.

A GET never decides (mail scanners open links); the page decides on POST, for a
signed-in reviewer, through the same rules as the console.
"""

from __future__ import annotations

from functools import partial

from django.contrib import messages
from django.core import signing
from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_POST

from approvals.views.access import get_call_for_reviewer, reviewer_required
from approvals.views.calls import preview_rows
from approvals.views.present import argument_rows, preview_title
from audit.http import ConsoleRequest
from notifications import deciding, links, slackapp
from notifications.models import Channel, Kind, Preference
from notifications.render import shown_arguments


@require_http_methods(["GET", "POST"])
@reviewer_required
def decide(request: ConsoleRequest, token: str) -> HttpResponse:
    """Show the call an email link was sent for, with its arguments and preview; decide on POST."""
    try:
        bound = links.read_token(token)
    except (signing.BadSignature, ValueError):
        return render(request, "notifications/link_invalid.html", status=400)
    call = get_call_for_reviewer(request, bound.call_id)
    if request.method == "POST":
        outcome = deciding.decide(bound, request.user, request.POST.get("decision", ""), request.POST.get("reason", ""))
        (messages.success if outcome.counted else messages.error)(request, outcome.text)
        return redirect("notifications:decide", token=token)
    context = {
        "call": call,
        "token": token,
        "changed": deciding.changed_since(call, bound),
        "arguments": argument_rows(shown_arguments(call), call.tool.input_schema or {}),
        # The console's own panel: it asks the downstream for the dry run once the page is shown.
        "preview": call.preview or {},
        "preview_rows": preview_rows(call.preview or {}),
        "preview_title": preview_title(call.status),
    }
    return render(request, "notifications/decide.html", context)


@csrf_exempt  # Slack signs its requests instead (verified below); it has no CSRF token
@require_POST
def slack_interactions(request: HttpRequest, channel_id: int) -> HttpResponse:
    """Receive a Slack button click: 401 unless signed by the channel's app within five minutes; then decide."""
    channel = Channel.objects.filter(pk=channel_id, kind=Kind.SLACK, enabled=True).first()
    if channel is None or not channel.signing_secret:
        return HttpResponse(status=404)
    if not slackapp.verified(channel, request.body, request.headers):
        return HttpResponse("invalid signature", status=401)
    try:
        click = slackapp.Click.parse(request.POST.get("payload", ""))
    except ValueError:
        return HttpResponse(status=400)
    text = slackapp.answer(channel, click)
    if click.response_url:
        transaction.on_commit(partial(slackapp.reply_later, channel.pk, click.response_url, text), robust=True)
    return JsonResponse({"response_type": "ephemeral", "replace_original": False, "text": text})


@require_http_methods(["GET", "POST"])
@reviewer_required
def slack_link(request: ConsoleRequest, token: str) -> HttpResponse:
    """The one-time step mapping a Slack user to the signed-in reviewer (when no verified email matched)."""
    try:
        who = slackapp.read_link_token(token)
    except (signing.BadSignature, ValueError):
        return render(request, "notifications/link_invalid.html", status=400)
    if request.method == "POST":
        slackapp.link(who, request.user)
        messages.success(request, "Linked: your clicks in Slack now decide as you.")
        return redirect("notifications:preferences")
    return render(request, "notifications/slack_link.html", {"who": who})


@require_http_methods(["GET", "POST"])
@reviewer_required
def preferences(request: ConsoleRequest) -> HttpResponse:
    """A reviewer's own notification choice: mail me the calls waiting for a reviewer."""
    preference, _ = Preference.objects.get_or_create(user=request.user)
    if request.method == "POST":
        preference.email_pending = request.POST.get("email_pending") == "on"
        preference.save(update_fields=["email_pending"])
        messages.success(request, "Saved.")
        return redirect("notifications:preferences")
    return render(request, "notifications/preferences.html", {"preference": preference})
